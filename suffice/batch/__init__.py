"""Batch scoring as a library: read records, judge them in batches, write one row each,
resume by id; in this process, on Ray actors, or with any judge given (``judge_file(judge=...)``); and
:class:`RayJudge`, a pool of Ray actors as a :class:`~suffice.JudgeProtocol`.  The CLI only builds the options."""

from suffice.batch.inputs import InputFile, Shard
from suffice.batch.options import BatchOptions, RayOptions
from suffice.batch.ray_data import judge_dataset
from suffice.batch.ray_scorer import RayJudge
from suffice.batch.runner import BatchReport, journal_path, judge_file
from suffice.records.fields import FieldMap
from suffice.rows.shaping import result_row

__all__ = [
    "BatchOptions",
    "BatchReport",
    "FieldMap",
    "InputFile",
    "RayJudge",
    "RayOptions",
    "Shard",
    "journal_path",
    "judge_dataset",
    "judge_file",
    "result_row",
]
