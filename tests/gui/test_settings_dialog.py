"""The settings: grouped fields with units and help, what does not apply disabled, the CPU-build GPU note, the
draft source / k policy split (and old settings files with one "draft mode" loading into it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QGroupBox

from outrider.engine.events import LoadedPair, ModelFacts
from outrider.settings import AppSettings, load_settings, save_settings
from outrider.ui.dialogs.settings_dialog import GROUPS, SettingsDialog
from outrider.ui.picker.choice import PairChoice
from outrider.ui.settings import RELOAD_KEYS, drafting_text, reload_needed


def _dialog(qtbot: Any, settings: AppSettings | None = None, **kw: Any) -> SettingsDialog:
    dialog = SettingsDialog(settings or AppSettings(), **kw)
    qtbot.addWidget(dialog)
    return dialog


@pytest.mark.parametrize(("mode", "source", "policy", "k"), [
    ("auto", "model", "auto", None), ("fixed", "model", "fixed", 7), ("off", "none", "auto", 0),
    ("lookup", "lookup", "auto", None)])
def test_an_old_draft_mode_loads_into_source_and_k_policy(tmp_path: Path, mode: str, source: str, policy: str,
                                                          k: int | None) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"draft_mode": mode, "k": 7, "user_overrides": "draft_mode,p_min"}), encoding="utf-8")
    settings, notice = load_settings(path)
    assert notice is None
    assert (settings.draft_source, settings.k_policy) == (source, policy)
    assert settings.draft_params().k == k
    assert settings.overridden() == {"draft_source", "k_policy", "p_min"}
    save_settings(path, settings)
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert "draft_mode" not in saved and saved["draft_source"] == source and saved["k_policy"] == policy


def test_new_keys_win_over_an_old_draft_mode_and_a_bad_one_is_ignored() -> None:
    assert AppSettings.from_json({"draft_mode": "off", "draft_source": "lookup"}).draft_source == "lookup"
    bad = AppSettings.from_json({"draft_mode": "sideways", "k_max": 99, "k_policy": "sometimes"})
    assert (bad.draft_source, bad.k_policy, bad.k_max) == ("model", "auto", 16)


def test_auto_k_ceiling_reaches_the_engine_request() -> None:
    params = AppSettings(k_policy="auto", k_max=6).draft_params()
    assert (params.k, params.k_max) == (None, 6)
    assert AppSettings(k_policy="fixed", k=3, k_max=6).draft_params().k == 3
    assert AppSettings(draft_source="none", k_policy="fixed", k=3).draft_params().k == 0


def test_fields_come_in_four_groups_with_units_and_help(qtbot: Any) -> None:
    dialog = _dialog(qtbot)
    assert tuple(dialog.groups) == GROUPS == ("Drafting", "Sampling", "Hardware", "Context")
    where = {"draft_source": "Drafting", "lookup_history": "Drafting", "k_policy": "Drafting", "k": "Drafting",
             "k_max": "Drafting",
             "p_min": "Drafting", "temperature": "Sampling", "top_p": "Sampling", "seed": "Sampling",
             "sampler": "Sampling", "target_gpu_layers": "Hardware", "threads": "Hardware", "rpc_servers": "Hardware",
             "target_split": "Hardware", "context_size": "Context",
             "max_tokens": "Context", "system_prompt": "Context"}
    for name, group in where.items():
        widget = getattr(dialog, name)
        assert dialog.groups[group].isAncestorOf(widget), name
        assert dialog.help_labels[name].text(), f"{name} has no help line"
    assert len(dialog.help_labels) == 21  # every field
    assert dialog.context_size.suffix() == " tokens" and dialog.k.suffix() == " tokens"
    assert dialog.k_max.suffix() == " tokens" and dialog.target_gpu_layers.suffix() == " layers"
    assert all(isinstance(b, QGroupBox) for b in dialog.groups.values())


def test_fixed_k_is_disabled_under_automatic_k_and_the_ceiling_under_fixed(qtbot: Any) -> None:
    dialog = _dialog(qtbot, AppSettings(k_policy="auto"))
    assert not dialog.k.isEnabled() and dialog.k_max.isEnabled()
    assert "Not used" in dialog.help_labels["k"].text()
    dialog.k_policy.setCurrentIndex(dialog.k_policy.findData("fixed"))
    assert dialog.k.isEnabled() and not dialog.k_max.isEnabled()
    assert "Not used" in dialog.help_labels["k_max"].text()


def test_no_draft_source_disables_drafting_and_lookup_disables_p_min(qtbot: Any) -> None:
    dialog = _dialog(qtbot)
    assert dialog.p_min.isEnabled() and dialog.draft_min.isEnabled()
    dialog.draft_source.setCurrentIndex(dialog.draft_source.findData("lookup"))
    assert not dialog.p_min.isEnabled() and dialog.draft_min.isEnabled() and dialog.k_policy.isEnabled()
    assert not dialog.draft_gpu_layers.isEnabled()
    assert "no draft model" in dialog.help_labels["draft_gpu_layers"].text()
    dialog.draft_source.setCurrentIndex(dialog.draft_source.findData("none"))
    for w in (dialog.k_policy, dialog.k, dialog.k_max, dialog.draft_min, dialog.p_min):
        assert not w.isEnabled()
    assert "Plain decoding" in dialog.help_labels["draft_source"].text()


def test_top_k_and_top_p_are_disabled_at_temperature_zero(qtbot: Any) -> None:
    dialog = _dialog(qtbot, AppSettings(temperature=0.0))
    for w in (dialog.top_k, dialog.top_p, dialog.min_p, dialog.seed, dialog.sampler):
        assert not w.isEnabled()
    assert "do not apply" in dialog.help_labels["temperature"].text()
    dialog.temperature.setValue(0.7)
    for w in (dialog.top_k, dialog.top_p, dialog.min_p, dialog.seed, dialog.sampler):
        assert w.isEnabled()


def test_a_cpu_build_says_there_is_no_gpu_backend_and_how_to_get_one(qtbot: Any) -> None:
    cpu = _dialog(qtbot, backend={"name": "CPU", "gpu_offload": False})
    assert cpu.gpu_note.isVisibleTo(cpu)
    assert "no GPU backend" in cpu.gpu_note.text() and "rebuild llama-cpp-python" in cpu.gpu_note.text()
    assert "no GPU backend" in cpu.target_gpu_layers.specialValueText()
    assert cpu.target_gpu_layers.text().startswith("all")  # -1 = all, shown with the reason
    gpu = _dialog(qtbot, backend={"name": "CUDA", "gpu_offload": True})
    assert not gpu.gpu_note.isVisibleTo(gpu) and gpu.target_gpu_layers.specialValueText() == "all"
    unknown = _dialog(qtbot)  # the engine has not said yet: no claim either way
    assert not unknown.gpu_note.text()


def test_the_dialog_returns_the_split_settings(qtbot: Any) -> None:
    dialog = _dialog(qtbot, AppSettings(k_policy="fixed", k=5))
    dialog.draft_source.setCurrentIndex(dialog.draft_source.findData("lookup"))
    dialog.k_policy.setCurrentIndex(dialog.k_policy.findData("auto"))
    dialog.k_max.setValue(8)
    value = dialog.result_settings()
    assert (value.draft_source, value.k_policy, value.k, value.k_max) == ("lookup", "auto", 5, 8)
    spec = value.pair_spec("t.gguf", "d.gguf", False)
    assert spec.lookup and spec.draft is None


def test_the_sampler_choice_reaches_the_engine_request(qtbot: Any) -> None:
    """The Sampling group's sampler (default automatic) is what the engine is asked for; a bad stored one is reset."""
    dialog = _dialog(qtbot, AppSettings(temperature=0.7))
    assert dialog.result_settings().sampling().sampler == "auto"
    dialog.sampler.setCurrentIndex(dialog.sampler.findData("rejection"))
    assert dialog.result_settings().sampling().sampler == "rejection"
    assert AppSettings(sampler="gumbel").validated().sampler == "auto"


def test_history_lookup_is_on_by_default_and_the_dialog_turns_it_off(qtbot: Any) -> None:
    """On by default, the load request then names the history; unticked, it does not, and the change reloads
    the pair (the chain is built at load). (Without the checkbox in ``result_settings`` the setting stayed on.)"""
    assert AppSettings().lookup_history
    on = AppSettings().pair_spec("t.gguf", "d.gguf", False, history="/data/history.sqlite3")
    assert on.lookup_history == "/data/history.sqlite3" and on.draft_mode == "history+lookup+model"
    dialog = _dialog(qtbot, AppSettings())
    assert dialog.lookup_history.isChecked()
    dialog.lookup_history.setChecked(False)
    value = dialog.result_settings()
    assert not value.lookup_history
    assert value.pair_spec("t.gguf", "d.gguf", False, history="/data/history.sqlite3").lookup_history is None
    assert "lookup_history" in RELOAD_KEYS
    assert AppSettings.from_json({"lookup_history": False}).lookup_history is False


def _loaded(draft_mode: str) -> LoadedPair:
    draft = ModelFacts(path="/m/draft.gguf") if draft_mode == "model" else None
    return LoadedPair(ModelFacts(path="/m/t.gguf"), draft, draft_mode, 2048, "CPU", False, "chatml", 0, 0, ())


def test_the_status_text_follows_the_settings_not_the_loaded_drafter() -> None:
    lookup = _loaded("lookup")
    assert drafting_text(AppSettings(), lookup) == "draft prompt lookup (k auto ≤ 16)"
    assert drafting_text(AppSettings(draft_source="none"), lookup) == "draft off (plain decoding)"
    assert drafting_text(AppSettings(k_policy="fixed", k=3), _loaded("model")) == "draft draft.gguf (k 3)"


def test_a_reload_only_when_the_drafter_to_load_changes() -> None:
    pair = PairChoice(Path("t.gguf"), Path("d.gguf"), False, "t+d", "T + D")
    model = _loaded("model")
    assert not reload_needed(AppSettings(draft_source="none"), ["draft_source"], pair, model)  # k = 0 instead
    assert reload_needed(AppSettings(draft_source="lookup"), ["draft_source"], pair, model)
    assert not reload_needed(AppSettings(draft_source="model", lookup_history=False), ["draft_source"], pair, model)
    chain = _loaded("history+lookup+model")  # history lookup on (the default): the loaded chain is what it wants
    assert not reload_needed(AppSettings(draft_source="model"), ["draft_source"], pair, chain)
    assert reload_needed(AppSettings(draft_source="model"), ["lookup_history"], pair, chain)
    assert not reload_needed(AppSettings(k_policy="fixed"), ["k_policy"], pair, model)
    assert reload_needed(AppSettings(context_size=8192), ["context_size"], pair, model)
    assert reload_needed(AppSettings(rpc_servers="10.0.0.2:50052"), ["rpc_servers"], pair, model)
    assert reload_needed(AppSettings(target_split="3,1"), ["target_split"], pair, model)
    demo = PairChoice(Path("t.gguf"), None, True, "demo", "Demo")  # a lookup pair: model = lookup, no reload
    assert not reload_needed(AppSettings(draft_source="lookup", lookup_history=False), ["draft_source"], demo,
                             _loaded("lookup"))
    assert not reload_needed(AppSettings(), ["draft_source"], None, None)


def test_tab_goes_through_the_groups_in_order(qtbot: Any) -> None:
    dialog = _dialog(qtbot, AppSettings(temperature=0.5))
    order = ["draft_source", "k_policy", "k_max", "draft_min", "p_min", "temperature", "top_k", "top_p", "min_p",
             "seed", "sampler", "target_gpu_layers", "draft_gpu_layers", "threads", "rpc_servers", "target_split",
             "context_size", "max_tokens",
             "system_prompt"]  # k is disabled under automatic k: Tab skips it
    widgets = {getattr(dialog, name): name for name in order}
    dialog.show()
    qtbot.waitExposed(dialog)
    dialog.draft_source.setFocus()
    seen: list[str] = []
    for _ in range(60):
        focused = dialog.focusWidget()
        name = widgets.get(focused) or widgets.get(focused.parentWidget())  # a spin box's line edit
        if name and (not seen or seen[-1] != name):
            seen.append(name)
        if len(seen) == len(order):
            break
        dialog.focusNextChild()
    assert seen == order


@pytest.mark.parametrize(("field", "bad", "says"), [
    ("rpc_servers", "10.0.0.2", "HOST:PORT"), ("rpc_servers", "10.0.0.2:99999", "port must be a number"),
    ("rpc_servers", "a:1, a:1", "listed twice"), ("target_split", "3,x", "numbers separated by commas"),
    ("target_split", "0,0", "not all 0")])
def test_rpc_workers_and_split_are_checked_as_typed_and_nothing_is_lost(qtbot: Any, field: str, bad: str,
                                                                        says: str) -> None:
    dialog = _dialog(qtbot)
    dialog.show()
    box = getattr(dialog, field)
    box.setText(bad)
    assert says in dialog.help_labels[field].text() and not dialog.ok_button.isEnabled()
    dialog.accept()  # Enter in the dialog: refused, the text stays as typed
    assert dialog.isVisible() and box.text() == bad
    box.setText("")
    assert dialog.ok_button.isEnabled() and says not in dialog.help_labels[field].text()


def test_rpc_workers_and_split_reach_the_load_request(qtbot: Any) -> None:
    dialog = _dialog(qtbot, AppSettings(rpc_servers="10.0.0.2:50052"))
    assert dialog.rpc_servers.text() == "10.0.0.2:50052"
    dialog.rpc_servers.setText(" 10.0.0.2:50052, gpu-box:50053 ")
    dialog.target_split.setText("3,1,1")
    value = dialog.result_settings()
    assert value.rpc_servers == "10.0.0.2:50052, gpu-box:50053" and value.target_split == "3,1,1"
    spec = value.pair_spec("t.gguf", "d.gguf", False)
    assert spec.target_settings.rpc == ("10.0.0.2:50052", "gpu-box:50053")
    assert spec.target_settings.split == (3.0, 1.0, 1.0) and spec.draft_settings.rpc == ()
