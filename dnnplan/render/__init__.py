"""Everything the command line draws: rich tables, summary lines and warnings, from SI numbers."""
