"""The Kafka backend of the log: ``KafkaLog`` on one topic, through aiokafka (asyncio only).

``await open_log("kafka://host:9092[,host:9092]/topic?partitions=3&replication_factor=3")``.
Options (query parameters or keyword arguments): ``partitions``, ``replication_factor``,
``min_insync_replicas``, ``retention_ms``, ``create_topic``, ``transactional_id``, ``client_id``,
``request_timeout_s``, ``append_timeout_s``, ``linger_ms``, ``max_batch_bytes``,
``max_record_bytes``, ``poll_timeout_ms``, ``security_protocol``, ``sasl_mechanism``,
``sasl_plain_username``, ``sasl_plain_password``, ``ssl_cafile``, ``ssl_certfile``,
``ssl_keyfile``.
"""

from log.kafka.kafka_log import KafkaLog
from log.kafka.options import KafkaOptions, parse_options

__all__ = ["KafkaLog", "KafkaOptions", "parse_options"]
