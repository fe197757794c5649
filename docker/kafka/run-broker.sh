#!/usr/bin/env bash
# Entrypoint of the swa-es Kafka image: writes server.properties from the KAFKA_* variables
# (KAFKA_LOG_DIRS -> log.dirs; "___" stands for "-" and "__" for "_", as in apache/kafka),
# formats the storage with CLUSTER_ID on the first start, then runs the broker in the foreground.
set -euo pipefail

props=/tmp/server.properties
: "${CLUSTER_ID:?CLUSTER_ID must be set (any kafka-storage random-uuid value)}"
: >"$props"
while IFS='=' read -r name value; do
    case "$name" in
    KAFKA_HEAP_OPTS | KAFKA_JVM_OPTS) continue ;;
    KAFKA_*)
        key="$(printf '%s' "${name#KAFKA_}" | tr '[:upper:]' '[:lower:]' |
            sed -e 's/___/-/g' -e 's/__/\x01/g' -e 's/_/./g' -e 's/\x01/_/g')"
        printf '%s=%s\n' "$key" "$value" >>"$props"
        ;;
    esac
done < <(env)

classpath="$(find /opt/kafka/libs -maxdepth 1 -name '*.jar' | sort | paste -sd:)"
# Sized for small machines: few GC and JIT threads.
jvm_opts="-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:ParallelGCThreads=2 -XX:ConcGCThreads=1 \
-XX:CICompilerCount=2 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true ${KAFKA_JVM_OPTS:-}"
log_dir="$(sed -n 's/^log\.dirs=//p' "$props")"
if [ ! -f "${log_dir:-/var/lib/kafka/data}/meta.properties" ]; then
    # shellcheck disable=SC2086 # option lists
    java $jvm_opts -Xmx256m -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile=/opt/kafka/config/log4j2-tools.properties -cp "$classpath" \
        kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$props" --ignore-formatted
fi
# shellcheck disable=SC2086
exec java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} $jvm_opts -Dkafka.logs.dir=/tmp/kafka-logs \
    -Dlog4j2.configurationFile=/opt/kafka/config/log4j2-broker.properties -cp "$classpath" \
    kafka.Kafka "$props"
