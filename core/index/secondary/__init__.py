"""Secondary indexes: value -> row ids of each base file, so selective reads read only those rows.

- `definitions`: index definitions (`.hoodie/.index/definitions.json`), validation.
- `predicates`: read filters as OR-of-AND column predicates; lakeward's extra operators.
- `bitmap`, `text`: the two index implementations (build from Arrow, answer predicates).
- `storage`: where index files live and which base files are indexed.
- `build`: build the index files of one base file (any engine).
- `read`: snapshot reads through the indexes, and `explain`.
- `api`: the standard API the Table, CLI and daemon use.

Kept free of imports so that low-level modules (read filters) can import `predicates`.
"""

from lakeward.core.lazy import on_first_use

__getattr__ = on_first_use(__name__)  # submodules load when first used (start-up time, issue 23)
