"""The app's dialogs and their Qt-side helpers: the benchmark (runner, exactness check, results) and the settings."""
