"""RECORD_INDEX tagging on the Spark data plane: the batch's keys looked up on the driver.

The batch's (partition, key, is-delete) columns are collected to the driver as Arrow (keys
only, not records), located in one pass through the metadata table's `record_index` partition
(`RecordIndex.prefetch`, then `located_by_record_index` per partition, as the local engine
does: a key the index places in another partition is refused), and the found keys go back to
the executors as a small DataFrame joined to the records (broadcast when the batch's keys fit
one). The lookup is driver-side rather than one Spark task per record-index file group: its
cost is parsing the record-index HFiles and log blocks, which the driver does once per write
(and caches for the process: metadata files never change), where tasks would each parse the
blocks their share of keys falls in; the keys of a moderate batch are small next to that.

The tagging is exact, so the write also tells the record index what it changed
(`RecordIndexTagging.change`): keys found new go to the file group they were routed to
(collected from the executors after the write), located deletes are gone, updates stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.merge import PARTITION_PATH, RECORD_KEY
from lakeward.core.metadata_table.record_index import (
    RecordIndex,
    RecordIndexChange,
    located_by_record_index,
    tagged_change,
)
from lakeward.core.storage import Storage
from lakeward.core.write.partitioner import LOCATION, split_by

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Column of the tagged records: the key was not in the index (an insert, unless a delete).
IS_NEW = "__lakeward_is_new"
_PARTITION = "__lw_ri_partition"
_KEY = "__lw_ri_key"


class RecordIndexTagging:
    """One write's record-index lookup: where each of the batch's keys lives, found on the driver."""

    def __init__(self, storage: Storage, keys: pa.Table, candidates: Sequence[FileSlice], is_delete: str):
        """`keys`: the batch's (PARTITION_PATH, RECORD_KEY, `is_delete`) columns; `candidates`: the
        latest file slices of the batch's partitions (a partition without slices holds no key; a key
        the index places in another partition is refused wherever the batch puts it)."""
        index = RecordIndex(storage)
        index.prefetch(keys.column(RECORD_KEY).combine_chunks())  # one pass for all partitions
        by_partition: dict[str, list[FileSlice]] = {}
        for s in candidates:
            by_partition.setdefault(s.partition_path, []).append(s)
        found: list[pa.Table] = []
        for partition, rows in split_by(keys, PARTITION_PATH).items():
            slices = by_partition.get(partition or "", [])
            key_column = rows.column(RECORD_KEY).combine_chunks()
            # a partition without file groups holds no key, but the index may place one elsewhere (refused)
            deletes = pc.fill_null(rows.column(is_delete).combine_chunks(), False)
            file_ids = located_by_record_index(index, partition or "", slices, key_column, deletes)
            hit = pc.is_valid(file_ids)
            found.append(
                pa.table(
                    {
                        _PARTITION: pa.array([partition or ""] * len(key_column), pa.string()).filter(hit),
                        _KEY: key_column.filter(hit),
                        LOCATION: file_ids.filter(hit),
                        is_delete: rows.column(is_delete).combine_chunks().filter(hit),
                    }
                )
            )
        #: (partition, key, file id, is delete) of every key the index holds.
        self.found = pa.concat_tables(found) if found else None
        flags = pc.fill_null(self.found.column(is_delete), False) if self.found is not None else None
        #: Keys located and deleted by this write.
        self.deleted = self.found.column(_KEY).filter(flags).combine_chunks() if self.found is not None else None
        self._is_delete = is_delete
        self._inserted: pa.Table | None = None

    @property
    def located_deletes(self) -> int:
        """How many of the batch's deletes (and delete markers) hit a stored key."""
        return 0 if self.deleted is None else len(self.deleted)

    def tag(self, records: DataFrame, broadcast: bool) -> DataFrame:
        """`records` with LOCATION (the file id holding the key, null: new) and IS_NEW."""
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark.sql import functions as F

        if self.found is None or not self.found.num_rows:
            tagged = records.withColumn(LOCATION, F.lit(None).cast("string"))
        else:
            spark = records.sparkSession
            located = spark.createDataFrame(self.found.select([_PARTITION, _KEY, LOCATION]))
            if broadcast:
                located = F.broadcast(located)
            partition = F.coalesce(records[PARTITION_PATH], F.lit(""))
            condition = (partition == located[_PARTITION]) & (records[RECORD_KEY] == located[_KEY])
            tagged = records.join(located, condition, "left").drop(_PARTITION, _KEY)
        return tagged.withColumn(IS_NEW, F.col(LOCATION).isNull())

    def collect_inserted(self, routed: DataFrame) -> None:
        """Remember where the write routed its new keys (one small Spark job over the tagged batch)."""
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark.sql import functions as F

        new = routed.filter(F.col(IS_NEW) & ~F.coalesce(F.col(self._is_delete), F.lit(False)))
        self._inserted = new.select(PARTITION_PATH, RECORD_KEY, LOCATION).toArrow()

    def change(self, instant_time: str) -> RecordIndexChange:
        """The record-index change of the write (`tagged_change`), after `collect_inserted`."""
        inserted: list[tuple[str, str, pa.Array]] = []
        if self._inserted is not None and self._inserted.num_rows:
            with_group = self._inserted.append_column(
                "__lw_group",
                pc.binary_join_element_wise(
                    pc.fill_null(self._inserted.column(PARTITION_PATH), ""), self._inserted.column(LOCATION), "\x00"
                ),
            )
            for group, rows in split_by(with_group, "__lw_group").items():
                partition, file_id = (group or "").split("\x00", 1)
                inserted.append((partition, file_id, rows.column(RECORD_KEY).combine_chunks()))
        return tagged_change(instant_time, inserted, [] if self.deleted is None else [self.deleted])


__all__ = ["IS_NEW", "RecordIndexTagging"]
