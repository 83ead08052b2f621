"""The click CLI: wiring only; the work happens in the modules it calls."""

# The terminal width from which `--help` is the text written ahead (help_text.py), answered by
# entry.py before click is imported; main.write_help_text writes it that wide. Here, where both
# read it, so that neither module imports the other for it.
HELP_COLUMNS = 80  # click's help is as wide on every terminal this wide or wider
