"""The pair picker: choose a target + draft from the catalogue, download it, bring your own, or use what is on disk.

``dialog.PairPickerDialog`` holds one widget per tab: ``catalogue_tab``, ``downloads_tab``, ``own_pair_tab`` and
``on_disk_tab``; ``choice.PairChoice`` is what it emits. Import from those modules.
"""
