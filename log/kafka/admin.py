"""Topic creation and discovery for ``KafkaLog``: the topic exists, with leaders, before use.

The log's topic is created with the configured partitions and replication factor, time-based
retention off (``retention.ms=-1``: an event log must replay from its first record; size it with
the broker's disks or set ``retention_ms``), ``cleanup.policy=delete`` (compaction would drop
order-dependent events) and ``max.message.bytes`` large enough for ``max_record_bytes``.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from log.errors import ConfigError, LogUnavailableError
from log.kafka.errors import is_kafka_error, translate
from log.kafka.options import KafkaOptions

logger = logging.getLogger(__name__)

RECORD_OVERHEAD_BYTES = 1024
_UNKNOWN_TOPIC = kafka_errors.UnknownTopicOrPartitionError.errno
_LEADER_POLL_S = 0.1


def topic_configs(options: KafkaOptions) -> dict[str, str]:
    """The topic-level settings the log is created with."""
    configs = {
        "cleanup.policy": "delete",
        "retention.ms": str(options.retention_ms),
        "max.message.bytes": str(options.max_record_bytes + RECORD_OVERHEAD_BYTES),
    }
    if options.min_insync_replicas is not None:
        configs["min.insync.replicas"] = str(options.min_insync_replicas)
    return configs


def _partitions_with_leaders(description: dict[str, Any]) -> tuple[int, int]:
    """(partitions, partitions that have a leader) of one ``describe_topics`` entry."""
    partitions = description["partitions"]
    led = sum(1 for p in partitions if p["error_code"] == 0 and p["leader"] >= 0)
    return len(partitions), led


async def _describe(admin: AIOKafkaAdminClient, topic: str) -> dict[str, Any] | None:
    """The topic's metadata, or None when the broker does not know it."""
    (description,) = await admin.describe_topics([topic])
    code = description["error_code"]
    if code == _UNKNOWN_TOPIC:
        return None
    if code != 0:
        raise kafka_errors.for_code(code)(f"describing topic {topic}")
    return dict(description)


async def _create(
    admin: AIOKafkaAdminClient, options: KafkaOptions, partitions: int, configs: dict[str, str]
) -> None:
    new_topic = NewTopic(
        options.topic, partitions, options.replication_factor, topic_configs=configs
    )
    response = await admin.create_topics([new_topic])
    for entry in response.to_object()["topic_errors"]:
        code = entry["error_code"]
        if code in (0, kafka_errors.TopicAlreadyExistsError.errno):
            continue
        reason = entry.get("error_message") or kafka_errors.for_code(code).__name__
        raise ConfigError("topic", f"creating {options.topic!r} failed: {reason}")
    logger.info(
        "created topic %s (%d partitions, replication factor %d)",
        options.topic,
        partitions,
        options.replication_factor,
    )


async def _wait_for_leaders(admin: AIOKafkaAdminClient, topic: str) -> int:
    """Poll metadata until every partition of ``topic`` has a leader; return the count."""
    while True:
        description = await _describe(admin, topic)
        if description is not None:
            total, led = _partitions_with_leaders(description)
            if total and led == total:
                return total
        await anyio.sleep(_LEADER_POLL_S)


async def _ensure(
    admin: AIOKafkaAdminClient,
    options: KafkaOptions,
    partitions: int | None,
    configs: dict[str, str],
) -> int:
    description = await _describe(admin, options.topic)
    if description is None:
        if not options.create_topic:
            raise ConfigError("topic", f"{options.topic!r} does not exist and create_topic=false")
        await _create(admin, options, partitions or 1, configs)
    count = await _wait_for_leaders(admin, options.topic)
    if partitions is not None and count != partitions:
        raise ConfigError(
            "partitions",
            f"topic {options.topic!r} exists with {count} partitions, not {partitions}",
        )
    return count


async def ensure_topic(
    options: KafkaOptions, partitions: int | None, configs: dict[str, str] | None = None
) -> int:
    """Create the log's topic unless it exists, wait for its leaders, return its partition count.

    ``partitions`` None accepts whatever an existing topic has (and creates one partition).
    ``configs`` are the topic-level settings of a new topic (default: ``topic_configs``)."""
    admin = AIOKafkaAdminClient(**options.client_kwargs())
    try:
        with anyio.fail_after(options.request_timeout_s * 2):
            await admin.start()
            return await _ensure(
                admin, options, partitions, topic_configs(options) if configs is None else configs
            )
    except TimeoutError:
        raise LogUnavailableError(
            f"topic {options.topic} at {options.bootstrap}: no leader for every partition "
            f"within {options.request_timeout_s * 2:g}s"
        ) from None
    except Exception as error:
        if is_kafka_error(error):
            raise translate(error, f"topic {options.topic} at {options.bootstrap}") from error
        raise
    finally:
        await admin.close()


async def describe_topic_configs(options: KafkaOptions) -> dict[str, str]:
    """The topic-level settings of ``options.topic`` as the broker reports them (defaults
    included)."""
    admin = AIOKafkaAdminClient(**options.client_kwargs())
    try:
        with anyio.fail_after(options.request_timeout_s * 2):
            await admin.start()
            (response,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, options.topic)]
            )
    except TimeoutError:
        raise LogUnavailableError(
            f"topic {options.topic} at {options.bootstrap}: no answer to describe_configs "
            f"within {options.request_timeout_s * 2:g}s"
        ) from None
    except Exception as error:
        if is_kafka_error(error):
            raise translate(error, f"topic {options.topic} at {options.bootstrap}") from error
        raise
    finally:
        await admin.close()
    (resource,) = response.to_object()["resources"]
    if resource["error_code"] != 0:
        reason = resource.get("error_message") or kafka_errors.for_code(resource["error_code"])
        raise ConfigError("topic", f"describing the settings of {options.topic!r}: {reason}")
    return {
        entry["config_names"]: entry["config_value"]
        for entry in resource["config_entries"]
        if entry["config_value"] is not None
    }
