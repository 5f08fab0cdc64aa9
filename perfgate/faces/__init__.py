"""The `perfgate` command's faces, one module per command: each owns its handlers (`cmd_*`) and its
`add_parser(sub)`, and is a thin face over the engine; perfgate/cli.py assembles them into one parser.
Imports no torch.

- compare.py     `perfgate compare`, `perfgate baseline update`, `perfgate results`
- history.py     `perfgate history add`, `perfgate history show`
- report.py      `perfgate report`
- ab.py          `perfgate ab`, with or without --paired
- bisect.py      `perfgate bisect`
- export.py      `perfgate export`
- completion.py  `perfgate completion bash|zsh`
- deal.py        `perfgate deal`; deal_args.py what it reads of the pytest args it deals
"""
