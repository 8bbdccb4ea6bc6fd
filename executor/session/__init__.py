"""The libraries behind `dnnplan execute`, `validate` and `predict`: one plan prepared, run and
compared (execute), a network's plans and baselines run and summarised (validate), the prediction
`execute` makes without the run (predict), and the planner's plan weighed in its step's context
(step_choice). They return results and never print."""
