"""The read scope of the config: every read option key, its values and its default, in one place.

These are Apache Hudi's Spark data source read keys (plus lakeward's `lakeward.cdc.images`);
the `lakeward` data source, its CDC surfaces (batch, streaming, SQL function) and `Table`'s
read errors name them from here. Incremental and CDC ranges are half-open: `(begin, end]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: `snapshot` (default), `read_optimized` or `incremental`.
QUERY_TYPE: Final = "hoodie.datasource.query.type"
SNAPSHOT, READ_OPTIMIZED, INCREMENTAL = "snapshot", "read_optimized", "incremental"
QUERY_TYPES: Final = (SNAPSHOT, READ_OPTIMIZED, INCREMENTAL)
#: Incremental and CDC reads: the exclusive begin instant (`earliest` for CDC) ...
BEGIN_INSTANT: Final = "hoodie.datasource.read.begin.instanttime"
#: ... and the inclusive end instant (default: the latest).
END_INSTANT: Final = "hoodie.datasource.read.end.instanttime"
#: Time travel: read as of this instant time or timestamp.
AS_OF_INSTANT: Final = "as.of.instant"
#: Incremental output: `latest_state` (records, default) or `cdc` (changes).
INCREMENTAL_FORMAT: Final = "hoodie.datasource.query.incremental.format"
LATEST_STATE, CDC = "latest_state", "cdc"
INCREMENTAL_FORMATS: Final = (LATEST_STATE, CDC)
#: Hudi's read option for data skipping with indexes: false reads without secondary indexes.
DATA_SKIPPING: Final = "hoodie.enable.data.skipping"
#: CDC reads: `json` (default, as Hudi's CDC output) or `struct`: the images as typed structs.
CDC_IMAGES: Final = "lakeward.cdc.images"
#: Hudi's streaming start: `earliest`, `latest` or an instant time (else the begin option).
STREAM_START: Final = "hoodie.datasource.streaming.startOffset"

#: The keys only CDC surfaces (change reads and streams) take.
CDC_READ_KEYS: Final = frozenset({CDC_IMAGES, STREAM_START})
#: Every read option the `lakeward` data source accepts.
READ_KEYS: Final = (
    frozenset({QUERY_TYPE, BEGIN_INSTANT, END_INSTANT, AS_OF_INSTANT, INCREMENTAL_FORMAT, DATA_SKIPPING})
    | CDC_READ_KEYS
)


def canonical_read_keys(options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` with each read key spelled as Hudi spells it, whatever its case: Spark hands a data
    source its options with lower-cased keys (`...streaming.startOffset` arrives as `...startoffset`)."""
    spelled = {key.lower(): key for key in READ_KEYS}
    return {spelled.get(str(k).lower(), str(k)): v for k, v in options.items()}


#: The default of each read option that has one (the others are unset by default).
READ_DEFAULTS: Final[dict[str, str]] = {
    QUERY_TYPE: SNAPSHOT,
    INCREMENTAL_FORMAT: LATEST_STATE,
    DATA_SKIPPING: "true",
    CDC_IMAGES: "json",
}
