"""Stage: results. Durable episode records and the paper's metrics over them."""

from rcb_env.results.records import EpisodeRecord, RecordLog, read_records
from rcb_env.results.summary import Rates, Summary, summarize

__all__ = ["EpisodeRecord", "Rates", "RecordLog", "Summary", "read_records", "summarize"]
