"""A Kafka log's identity is its topic's id, read from a real broker (Metadata v10+): stable for
the topic, another for another topic, a new one when the topic is deleted and created again."""

from __future__ import annotations

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from log import LogIdentity, identity_of
from log.kafka import KafkaLog
from log.kafka.topic_id import topic_id_text
from tests.fixtures.kafka import KafkaLogFactory, fresh_topic

pytestmark = pytest.mark.kafka

_DELETE_WAIT_S = 60.0


async def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and wait until the broker no longer lists it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        with anyio.fail_after(_DELETE_WAIT_S):
            while True:  # the broker says when it is gone only when asked
                if topic not in await admin.list_topics():
                    return
                await anyio.sleep(0.2)
    finally:
        await admin.close()


async def test_a_topic_has_an_id_that_every_client_of_it_sees(
    kafka_log_factory: KafkaLogFactory, request: pytest.FixtureRequest
) -> None:
    """Two logs on one topic agree; a log on another topic has another id."""
    first = await kafka_log_factory()
    identity = await first.identity()
    assert isinstance(identity, LogIdentity) and len(identity.log_id) == 22  # base64 of 16 bytes
    assert await identity_of(await kafka_log_factory(topic=first.topic)) == identity
    other = await kafka_log_factory(topic=fresh_topic(request))
    other_identity = await other.identity()
    assert other_identity is not None and not other_identity.same_log(identity)


async def test_a_recreated_topic_is_another_log(
    kafka_log_factory: KafkaLogFactory, kafka_bootstrap: str
) -> None:
    """Deleting the topic and creating it again under the same name gives a new id."""
    log = await kafka_log_factory()
    before = await log.identity()
    topic = log.topic
    await log.close()
    await delete_topic(kafka_bootstrap, topic)
    again: KafkaLog = await kafka_log_factory(topic=topic)
    after = await again.identity()
    assert before is not None and after is not None and not after.same_log(before)


def test_topic_ids_print_as_kafkas_tools_print_them() -> None:
    """URL-safe base64 without padding (``kafka-topics.sh --describe``'s TopicId)."""
    assert topic_id_text(bytes(range(16))) == "AAECAwQFBgcICQoLDA0ODw"
