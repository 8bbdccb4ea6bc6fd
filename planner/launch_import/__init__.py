"""A framework's launch configuration read back, to be predicted as a plan (pure; docs/export.md,
"Importing a launch configuration").

`dnnplan predict --from FILE` reads what a user already trains with (Megatron-LM's arguments as a
launch script passes them, a torchtitan job TOML, a DeepSpeed JSON) and predicts it. This package
is the seam every format goes through; the command line reads the file's text and renders.

The contract, for a reader of one more format:

1. **One module a format**, ``planner/launch_import/<format>.py``, with one function
   ``read(text: str, path: str) -> LaunchConfig`` (:class:`planner.launch_import.launch_config.LaunchConfig`):
   the file's text and its path (for messages). It reads every option it knows; an option that does
   not change the prediction (data, tokenizer, learning rate, logging, checkpoints...) goes to
   ``LaunchConfig.ignored`` with the reason; an option it does not know, a bad value, or options that
   contradict each other (or that the framework itself refuses together) raise one
   :class:`networks.errors.DnnplanError` naming the option and the file (``file=path``; ``line=`` where
   known) and a hint. It imports no file and knows no network: the model is what the file names
   (``network``: a zoo name or a spec / Hugging Face config path, None when it names none) and the
   shape it states (``shape``, checked against that network, or used to find the zoo network of that
   shape: :mod:`planner.launch_import.trained_network`).
2. **Register it** in :data:`planner.launch_import.formats.READERS` under its format name and, when
   its files are told apart by their suffix, in :data:`planner.launch_import.formats.SUFFIXES`
   (``.toml`` torchtitan, ``.json`` DeepSpeed; under another suffix a file is told by what it holds,
:func:`planner.launch_import.formats.format_of`, Megatron-LM arguments by default).
3. **What the predict path consumes** is a plan: :func:`planner.launch_import.to_plan.launch_plan`
   turns a :class:`LaunchConfig` and the network it trains into a :class:`planner.plan.plan.Plan`, the
   one `dnnplan predict PLAN.yaml` prices (executor.session.predict.predict_plan), so a plan
   exported and read back is priced exactly as the plan itself. A reader fills the layout fields the
   way :class:`LaunchConfig` documents them (Megatron-Core's layout of tensor, context, expert and data
   degrees over each pipeline stage's ranks; the stages' transformer layers; recomputation by
   granularity) and needs nothing else of the plan.

Modules: :mod:`launch_config` (the configuration read), :mod:`formats` (which reader a file takes),
:mod:`shell_tokens` (a launch script's tokens as bash's parser splits them: quotes, continuations,
comments, operators, redirections), :mod:`shell_words` (their expansion, variables and arrays, and
the training command),
:mod:`megatron` (Megatron-LM's arguments; parsed in :mod:`megatron_args`, named in
:mod:`megatron_options`), :mod:`torchtitan`
(torchtitan's job TOML), :mod:`deepspeed` (DeepSpeed's JSON), :mod:`value_kinds` (the kinds of
value their keys take, a wrong one refused in one line),
:mod:`trained_network` (the network a configuration trains, and its shape checked), :mod:`to_plan`
(the configuration as a plan).
"""
