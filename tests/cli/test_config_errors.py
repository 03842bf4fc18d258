"""Config dataclasses built from Python reject bad values with ``ValueError``."""

import re

import pytest

from zmqdata import service

BAD_WORKER = [
    ({"worker_tags": ("",)}, "WorkerConfig.worker_tags: ", "('',)"),
    ({"worker_tags": ("gpu", 3)}, "WorkerConfig.worker_tags: ", "('gpu', 3)"),
    ({"worker_tags": "gpu"}, "WorkerConfig.worker_tags: ", "'gpu'"),
    ({"port": "5050"}, "WorkerConfig.port: expected int", "'5050'"),
    ({"port": True}, "WorkerConfig.port: expected int", "True"),
    ({"host": ""}, "WorkerConfig.host: ", "''"),
    ({"host": 5}, "WorkerConfig.host: ", "5"),
    ({"heartbeat_interval_ms": 1.5}, "WorkerConfig.heartbeat_interval_ms: ", "1.5"),
    ({"metrics_port": True}, "WorkerConfig.metrics_port: ", "True"),
    ({"worker_address": b"h:1"}, "WorkerConfig.worker_address: ", "b'h:1'"),
    ({"data_transfer_protocol": "udp"}, "WorkerConfig.data_transfer_", "'udp'"),
]
BAD_DISPATCHER = [
    ({"fault_tolerant_mode": 1}, "DispatcherConfig.fault_tolerant_mode: ", "1"),
    ({"worker_addresses": ("",)}, "DispatcherConfig.worker_addresses: ", "('',)"),
    ({"work_dir": 3}, "DispatcherConfig.work_dir: ", "3"),
    ({"client_timeout_ms": None}, "DispatcherConfig.client_timeout_ms: ", "None"),
]


def _field_then_value(field: str, value: str) -> str:
    return f"^{re.escape(field)}.*{re.escape(value)}$"


@pytest.mark.parametrize(("kwargs", "field", "value"), BAD_WORKER)
def test_bad_worker_config_is_a_value_error_naming_field_and_value(
    kwargs, field, value
):
    with pytest.raises(ValueError, match=_field_then_value(field, value)) as caught:
        service.WorkerConfig("127.0.0.1:1", **kwargs)
    assert type(caught.value) is ValueError


@pytest.mark.parametrize(("kwargs", "field", "value"), BAD_DISPATCHER)
def test_bad_dispatcher_config_is_a_value_error_naming_field_and_value(
    kwargs, field, value
):
    with pytest.raises(ValueError, match=_field_then_value(field, value)) as caught:
        service.DispatcherConfig(**kwargs)
    assert type(caught.value) is ValueError
