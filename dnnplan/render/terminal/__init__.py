"""How the command line's text reaches the terminal: the consoles (rich, ending quietly when the
reader leaves), one-line errors and warnings on stderr, and a long search's progress line."""
