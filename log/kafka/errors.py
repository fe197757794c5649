"""Translation of aiokafka's errors into the log package's typed errors, at the log boundary.

Nothing above ``log.kafka`` ever sees an aiokafka exception: each one becomes a ``LogError``
whose ``retriable`` says whether trying the same call again can help.
"""

from __future__ import annotations

from aiokafka import errors as kafka_errors

from log.errors import ConfigError, LogClosedError, LogError, LogUnavailableError, LogWriteError

_CONFIG_ERRORS: tuple[type[BaseException], ...] = (
    kafka_errors.InvalidReplicationFactorError,
    kafka_errors.InvalidPartitionsError,
    kafka_errors.InvalidConfigurationError,
    kafka_errors.InvalidTopicError,
    kafka_errors.PolicyViolationError,
    kafka_errors.KafkaConfigurationError,
    kafka_errors.UnsupportedCodecError,
)
_ACCESS_ERRORS: tuple[type[BaseException], ...] = (
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.ClusterAuthorizationFailedError,
    kafka_errors.TransactionalIdAuthorizationFailed,
    kafka_errors.AuthenticationFailedError,
    kafka_errors.AuthenticationMethodNotSupported,
    kafka_errors.SaslAuthenticationFailed,
    kafka_errors.UnsupportedSaslMechanismError,
)
_UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    kafka_errors.KafkaConnectionError,
    kafka_errors.NoBrokersAvailable,
    kafka_errors.NodeNotReadyError,
    kafka_errors.KafkaTimeoutError,
    kafka_errors.KafkaUnavailableError,
    kafka_errors.RequestTimedOutError,
    ConnectionError,
    OSError,
)
_STOPPED_ERRORS: tuple[type[BaseException], ...] = (
    kafka_errors.ConsumerStoppedError,
    kafka_errors.ProducerClosed,
)


def is_kafka_error(error: BaseException) -> bool:
    """True for the exceptions aiokafka raises (that ``translate`` knows how to type)."""
    return isinstance(
        error,
        kafka_errors.KafkaError
        | kafka_errors.ConsumerStoppedError
        | kafka_errors.IllegalOperation
        | ConnectionError
        | OSError,
    )


def _retriable(error: BaseException) -> bool:
    return bool(getattr(error, "retriable", False))


def translate(error: BaseException, where: str, *, writing: bool = False) -> LogError:
    """The ``LogError`` for ``error``, raised while doing ``where`` (e.g. "topic t: append");
    ``writing`` makes an otherwise untyped failure a ``LogWriteError``."""
    detail = f"{where}: {type(error).__name__}: {error}"
    if isinstance(error, _STOPPED_ERRORS):
        return LogClosedError(f"{where}: the Kafka client was closed")
    if isinstance(error, kafka_errors.ProducerFenced | kafka_errors.InvalidProducerEpoch):
        return LogWriteError(
            f"{detail} (a newer writer with the same transactional_id fenced this one)",
            retriable=False,
        )
    if isinstance(error, _CONFIG_ERRORS):
        return ConfigError(where, f"the broker refused it: {type(error).__name__}: {error}")
    if isinstance(error, _ACCESS_ERRORS):
        return LogWriteError(f"{detail} (check credentials and ACLs)", retriable=False)
    if isinstance(error, kafka_errors.MessageSizeTooLargeError | kafka_errors.RecordTooLargeError):
        return LogWriteError(f"{detail} (raise max_record_bytes)", retriable=False)
    if isinstance(error, _UNAVAILABLE_ERRORS):
        return LogUnavailableError(detail)
    if writing:
        return LogWriteError(detail, retriable=_retriable(error))
    if _retriable(error):
        return LogUnavailableError(detail)
    return LogError(detail)
