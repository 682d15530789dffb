"""Prometheus' HTTP API: the project's one Prometheus query client (``promapi.client``)."""

from promapi.client import ALERT_COLUMNS as ALERT_COLUMNS
from promapi.client import DEFAULT_HINT as DEFAULT_HINT
from promapi.client import MAX_POINTS as MAX_POINTS
from promapi.client import NICE_STEPS_S as NICE_STEPS_S
from promapi.client import PromClient as PromClient
from promapi.client import PrometheusError as PrometheusError
from promapi.client import PrometheusQueryError as PrometheusQueryError
from promapi.client import PrometheusResponseError as PrometheusResponseError
from promapi.client import PrometheusUnreachable as PrometheusUnreachable
from promapi.client import Range as Range
from promapi.client import alerts_frame as alerts_frame
from promapi.client import aligned_range as aligned_range
from promapi.client import choose_step as choose_step
from promapi.client import increase_with_new as increase_with_new
from promapi.client import matrix_frame as matrix_frame
from promapi.client import promql_duration as promql_duration
from promapi.client import rate_window as rate_window
from promapi.client import rate_window_s as rate_window_s
from promapi.client import sample_value as sample_value
from promapi.client import unwrap as unwrap
from promapi.client import vector_frame as vector_frame
