"""Parsing of kafka:// URLs and options: typed values, ConfigError naming what is wrong."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from aiokafka import errors as kafka_errors

from log import ConfigError, LogClosedError, LogUnavailableError, LogWriteError, open_log
from log.kafka import parse_options
from log.kafka.errors import translate
from log.kafka.producer import producer_kwargs
from log.kafka.reader import consumer_kwargs


def test_query_strings_become_typed_options() -> None:
    """String query values are parsed into their types; several bootstrap servers are kept."""
    options = parse_options(
        "h1:9092,h2:9093",
        "/events",
        {
            "partitions": "3",
            "replication_factor": "3",
            "min_insync_replicas": "2",
            "request_timeout_s": "2.5",
            "create_topic": "false",
            "transactional_id": "worker-0",
        },
    )
    assert options.bootstrap_servers == ("h1:9092", "h2:9093")
    assert options.topic == "events"
    assert (options.partitions, options.replication_factor, options.min_insync_replicas) == (
        3,
        3,
        2,
    )
    assert options.request_timeout_s == 2.5
    assert options.create_topic is False
    assert options.transactional_id == "worker-0"


def test_producer_is_idempotent_with_acks_all_and_readers_read_committed() -> None:
    """The producer always has idempotence and acks=all; readers use no group and
    read_committed, and never reset silently."""
    options = parse_options("h:9092", "/t", {"transactional_id": "w"})
    producer = producer_kwargs(options)
    assert producer["enable_idempotence"] is True
    assert producer["acks"] == "all"
    assert producer["transactional_id"] == "w"
    consumer = consumer_kwargs(options)
    assert consumer["group_id"] is None
    assert consumer["isolation_level"] == "read_committed"
    assert consumer["enable_auto_commit"] is False
    assert consumer["auto_offset_reset"] == "none"


@pytest.mark.parametrize(
    ("netloc", "path", "options", "what"),
    [
        ("h:9092", "/t", {"partitions": "zero"}, "partitions"),
        ("h:9092", "/t", {"partitions": 0}, "partitions"),
        ("h:9092", "/t", {"replication_factor": True}, "replication_factor"),
        ("h:9092", "/t", {"request_timeout_s": "-1"}, "request_timeout_s"),
        ("h:9092", "/t", {"request_timeout_s": "inf"}, "request_timeout_s"),
        ("h:9092", "/t", {"create_topic": "maybe"}, "create_topic"),
        ("h:9092", "/t", {"security_protocol": "TLS"}, "security_protocol"),
        ("h:9092", "/t", {"fsync": "always"}, "fsync"),
        (
            "h:9092",
            "/t",
            {"replication_factor": 1, "min_insync_replicas": 2},
            "min_insync_replicas",
        ),
        ("h:9092", "/t", {"security_protocol": "SASL_SSL"}, "sasl_plain_username"),
        ("h:9092", "/t", {"sasl_mechanism": "PLAIN"}, "sasl_mechanism"),
        ("h:9092", "/t", {"ssl_keyfile": "k.pem"}, "ssl_keyfile"),
        ("h:9092", "/", {}, "topic"),
        ("h:9092", "/a/b", {}, "topic"),
        ("", "/t", {}, "url"),
        ("h", "/t", {}, "url"),
        ("h:99999", "/t", {}, "url"),
        ("user:pw@h:9092", "/t", {}, "url"),
    ],
)
def test_bad_values_name_the_option(
    netloc: str, path: str, options: dict[str, Any], what: str
) -> None:
    """Each bad value raises ConfigError whose ``what`` names the offending option."""
    with pytest.raises(ConfigError) as error:
        parse_options(netloc, path, options)
    assert error.value.what == what


def test_the_url_never_shows_the_password() -> None:
    """SASL credentials are accepted as options; the log's URL keeps the user, not the secret."""
    options = parse_options(
        "h:9092",
        "/t",
        {
            "security_protocol": "sasl_plaintext",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "svc",
            "sasl_plain_password": "s3cret",
        },
    )
    assert "s3cret" not in options.url
    assert "s3cret" not in repr(options)
    assert "sasl_plain_username=svc" in options.url
    kwargs = options.client_kwargs()
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_password"] == "s3cret"


def test_aiokafka_errors_become_typed_log_errors() -> None:
    """aiokafka's errors are translated at the boundary with the right ``retriable`` flag."""
    fenced = translate(kafka_errors.ProducerFenced(), "t: append", writing=True)
    assert isinstance(fenced, LogWriteError) and not fenced.retriable
    down = translate(kafka_errors.KafkaConnectionError(), "t: read")
    assert isinstance(down, LogUnavailableError) and down.retriable
    leader = translate(kafka_errors.NotLeaderForPartitionError(), "t: append", writing=True)
    assert isinstance(leader, LogWriteError) and leader.retriable
    too_big = translate(kafka_errors.MessageSizeTooLargeError(), "t: append", writing=True)
    assert isinstance(too_big, LogWriteError) and not too_big.retriable
    assert isinstance(translate(kafka_errors.ConsumerStoppedError(), "t: read"), LogClosedError)


async def test_unreachable_broker_is_a_retriable_unavailable_error() -> None:
    """Opening a log on a port where no broker listens fails with LogUnavailableError (retriable)
    naming the address, instead of hanging."""
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    with pytest.raises(LogUnavailableError) as error:
        await open_log(f"kafka://127.0.0.1:{port}/t", request_timeout_s=3)
    assert error.value.retriable
    assert f"127.0.0.1:{port}" in str(error.value)
