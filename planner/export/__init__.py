"""Plans out to the frameworks users run: a plan as a framework's own launch arguments, each option
named as that framework's release names it, and what the framework cannot express refused naming the
layer (pure: the command line renders and writes them; docs/export.md)."""
