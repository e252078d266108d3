"""Change data capture: what changed in each commit (insert, update, delete; before and after images).

- `changes`: the pure core: the changes of one commit to one file group, from the file
  group's rows before and after it (Arrow in, Arrow out), and the fold over a slice's log.
- `records`: change records as written into `.cdc` log files, per supplemental logging mode.
- `splits`: the units of a query's work (`ChangeSplit`: one commit's changes to one file
  group, the inference case that finds them, and the group's states it reads).
- `image_versions`: which file version each image a logging mode did not persist is read from.
- `extract`: which commits and file groups a CDC query covers, and how each one's changes
  are found (Hudi's inference cases), run per file group on either engine.
- `query`: the user-facing CDC read: validation of the range, output as JSON or structs.
"""
