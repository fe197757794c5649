"""A Kafka topic's id: the identity of a ``KafkaLog`` (``log.identity``).

Kafka gives every topic a random id when it is created (KIP-516, brokers 2.8 and later): a topic
deleted and created again under the same name gets a new one, which is exactly what tells a
snapshot of the old topic from one of the new. Brokers report it in Metadata responses from
version 10 on. aiokafka 0.14 speaks Metadata up to version 5 only, so this module declares
versions 10 and 11 of the request and response (flexible versions: compact strings and arrays,
tagged fields, all of which aiokafka's protocol types provide) and sends one through the admin
client, which negotiates the highest version both sides speak. A broker that speaks neither has
no topic ids to give: the topic's id is then None (and said so in a warning).

The id is shown as Kafka's own tools show it (``kafka-topics.sh --describe``: ``TopicId``),
the 16 bytes in URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
import logging
from io import BytesIO
from typing import Any, Final

import anyio
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from log.errors import LogUnavailableError
from log.kafka.errors import is_kafka_error, translate
from log.kafka.options import KafkaOptions

logger = logging.getLogger(__name__)

_METADATA: Final = 3
_UUID_BYTES: Final = 16
_ZERO_UUID: Final = bytes(_UUID_BYTES)


class _Uuid(AbstractType):  # type: ignore[misc]
    """Kafka's UUID field: 16 bytes."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        if len(value) != _UUID_BYTES:
            raise ValueError(f"a UUID is {_UUID_BYTES} bytes, got {len(value)}")
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        value = data.read(_UUID_BYTES)
        if len(value) != _UUID_BYTES:
            raise ValueError("buffer underrun decoding a UUID")
        return value


_BROKERS = CompactArray(
    ("node_id", Int32),
    ("host", CompactString("utf-8")),
    ("port", Int32),
    ("rack", CompactString("utf-8")),
    ("tags", TaggedFields),
)
_TOPICS = CompactArray(
    ("error_code", Int16),
    ("name", CompactString("utf-8")),
    ("topic_id", _Uuid),
    ("is_internal", Boolean),
    (
        "partitions",
        CompactArray(
            ("error_code", Int16),
            ("partition_index", Int32),
            ("leader_id", Int32),
            ("leader_epoch", Int32),
            ("replica_nodes", CompactArray(Int32)),
            ("isr_nodes", CompactArray(Int32)),
            ("offline_replicas", CompactArray(Int32)),
            ("tags", TaggedFields),
        ),
    ),
    ("topic_authorized_operations", Int32),
    ("tags", TaggedFields),
)
_REQUESTED_TOPICS = CompactArray(
    ("topic_id", _Uuid), ("name", CompactString("utf-8")), ("tags", TaggedFields)
)


class _MetadataResponseV10(Response):  # type: ignore[misc]
    API_KEY = _METADATA
    API_VERSION = 10
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("brokers", _BROKERS),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        ("topics", _TOPICS),
        ("cluster_authorized_operations", Int32),
        ("tags", TaggedFields),
    )


class _MetadataResponseV11(Response):  # type: ignore[misc]
    API_KEY = _METADATA
    API_VERSION = 11
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("brokers", _BROKERS),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        ("topics", _TOPICS),
        ("tags", TaggedFields),
    )


class _MetadataRequestV10(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = _METADATA
    API_VERSION = 10
    RESPONSE_TYPE = _MetadataResponseV10
    SCHEMA = Schema(
        ("topics", _REQUESTED_TOPICS),
        ("allow_auto_topic_creation", Boolean),
        ("include_cluster_authorized_operations", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class _MetadataRequestV11(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = _METADATA
    API_VERSION = 11
    RESPONSE_TYPE = _MetadataResponseV11
    SCHEMA = Schema(
        ("topics", _REQUESTED_TOPICS),
        ("allow_auto_topic_creation", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class _TopicIdRequest(Request[_MetadataRequestV10 | _MetadataRequestV11]):  # type: ignore[misc]
    """Metadata of one topic, by name, at version 10 or 11 (whichever the broker speaks)."""

    API_KEY = _METADATA

    def __init__(self, topic: str) -> None:
        self._topic = topic

    def build(self, request_struct_class: type[Any]) -> Any:
        no_tags: dict[int, bytes] = {}
        topics = [(_ZERO_UUID, self._topic, no_tags)]
        if request_struct_class.API_VERSION == 10:
            return request_struct_class(topics, False, False, False, no_tags)
        return request_struct_class(topics, False, False, no_tags)


def topic_id_text(raw: bytes) -> str:
    """A topic id as Kafka's tools print it: URL-safe base64 of its 16 bytes, no padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _id_in(response: Any, topic: str) -> str | None:
    for entry in response.to_object()["topics"]:
        if entry["name"] != topic:
            continue
        code = entry["error_code"]
        if code != 0:
            raise kafka_errors.for_code(code)(f"metadata of topic {topic}")
        raw: bytes = entry["topic_id"]
        return None if raw == _ZERO_UUID else topic_id_text(raw)
    raise kafka_errors.UnknownTopicOrPartitionError(f"metadata names no topic {topic}")


async def fetch_topic_id(options: KafkaOptions) -> str | None:
    """The id of ``options.topic`` (see the module docstring); None when the broker is too old
    to have topic ids. Broker errors come out as ``LogError``s."""
    where = f"topic {options.topic} at {options.bootstrap}: topic id"
    admin = AIOKafkaAdminClient(**options.client_kwargs())
    try:
        with anyio.fail_after(options.request_timeout_s * 2):
            await admin.start()
            try:
                # the admin client's own way to send a request it has no method for
                response = await admin._send_request(_TopicIdRequest(options.topic))
            except (NotImplementedError, kafka_errors.IncompatibleBrokerVersion) as exc:
                logger.warning(
                    "%s: the broker does not report topic ids (Metadata v10+, Kafka 2.8+): %s; "
                    "snapshots of this log record no identity",
                    where,
                    exc,
                )
                return None
            return _id_in(response, options.topic)
    except TimeoutError:
        raise LogUnavailableError(
            f"{where}: no answer within {options.request_timeout_s * 2:g}s"
        ) from None
    except Exception as error:
        if is_kafka_error(error):
            raise translate(error, where) from error
        raise
    finally:
        await admin.close()
