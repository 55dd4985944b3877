"""The sanctum: a being's human-readable memory of small Markdown files, woken every start."""
