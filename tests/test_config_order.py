"""The config dataclasses keep shared/API.md's field order (positional calls)."""

from __future__ import annotations

import dataclasses

import pytest

from zmqdata import service

# shared/API.md, "Servers": the signatures of DispatcherConfig and WorkerConfig.
API_ORDER = {
    service.DispatcherConfig: (
        "port", "protocol", "host", "work_dir", "fault_tolerant_mode",
        "worker_addresses", "job_gc_check_interval_ms", "job_gc_timeout_ms",
        "worker_timeout_ms", "client_timeout_ms", "gc_dynamic_sharding_jobs",
    ),
    service.WorkerConfig: (
        "dispatcher_address", "worker_address", "port", "protocol", "host",
        "heartbeat_interval_ms", "dispatcher_timeout_ms", "data_transfer_protocol",
        "worker_tags", "cross_trainer_cache_size_bytes",
    ),
}  # fmt: skip


@pytest.mark.parametrize("config", API_ORDER, ids=lambda config: config.__name__)
def test_the_fields_api_md_lists_come_first_in_its_order(config: type) -> None:
    names = tuple(f.name for f in dataclasses.fields(config))
    assert names[: len(API_ORDER[config])] == API_ORDER[config]


def test_a_positional_call_written_against_api_md_sets_the_fields_it_names() -> None:
    config = service.DispatcherConfig(
        0, "tcp", "127.0.0.1", None, False, None, 1, 2, 3, 4, True
    )
    assert config.gc_dynamic_sharding_jobs is True
    assert config.client_timeout_ms == 4
