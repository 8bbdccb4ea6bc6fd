"""What the command line draws of plans run for real: `dnnplan execute`'s and `dnnplan validate`'s
tables of predicted against measured (execute.py), and `validate --report`'s report (report.py) and
figures (figures.py)."""
