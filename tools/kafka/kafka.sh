#!/usr/bin/env bash
# A local Kafka (KRaft) broker or 3-node cluster from Maven Central jars; no Docker, no distribution.
#
#   kafka.sh start  [--nodes 1|3] [--port N] [--fresh] [--timeout-s T]   prints the bootstrap address
#   kafka.sh stop   [--port N] [--node I] [--kill] [--clean]              stops by the PID files
#   kafka.sh status [--port N]                                            exit 0 when all nodes run
#   kafka.sh wait   [--port N] [--timeout-s T]                            until the cluster answers
#   kafka.sh start  --port N --node I                                     restarts one stopped node
#                                                                         (once its ports are free)
#   kafka.sh tool   CLASS [ARGS...]                                       runs a Kafka tool class
#   kafka.sh classpath                                                    resolves, prints the classpath
#
# A cluster is named by its base port N (default 19092): node I listens for clients on
# N + 2(I-1) and for its controller on N + 2(I-1) + 1, on 127.0.0.1 only. Its files live in
# tools/kafka/run/N/ (KAFKA_RUN_DIR overrides tools/kafka/run). Jars are resolved once into
# tools/kafka/.cache/libs; a second run reuses them. stdout carries only the bootstrap address
# (start) or the classpath (classpath); everything else goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache_dir="$here/.cache"
libs_dir="$cache_dir/libs"
# Class-data archive of the broker's classes (AppCDS): about a third less CPU per broker start.
# Dumped from the first broker that runs without one; reused while the classpath stays the same.
cds_archive="$cache_dir/kafka-broker.jsa"
run_root="${KAFKA_RUN_DIR:-$here/run}"
java_bin="${JAVA:-java}"
heap_opts="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
# Sized for 2 cores: few GC and JIT threads; the broker's own thread counts are in server.properties.
jvm_opts="-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
-XX:+ExplicitGCInvokesConcurrent -XX:ParallelGCThreads=2 -XX:ConcGCThreads=1 -XX:CICompilerCount=2 \
-XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true"

say() { echo "kafka.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

python_bin() {
    if [ -x "$repo/.venv/bin/python" ]; then echo "$repo/.venv/bin/python"; else echo python3; fi
}

# --- classpath -----------------------------------------------------------------------------------

resolve_jars() {
    local stamp want
    want="$(sha256sum "$here/pom.xml" | cut -d' ' -f1)"
    stamp="$libs_dir/.pom-sha256"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
    command -v mvn >/dev/null || die "mvn not found (Maven 3.8+ resolves the broker jars)"
    mkdir -p "$cache_dir"
    (
        flock 9
        if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
        say "resolving Kafka jars with Maven into $libs_dir (first run only)"
        local tmp="$cache_dir/libs.tmp.$$"
        rm -rf "$tmp"
        mvn -B -q -f "$here/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
            -DoutputDirectory="$tmp" >&2 || { rm -rf "$tmp"; die "Maven could not resolve the jars"; }
        echo "$want" >"$tmp/.pom-sha256"
        rm -rf "$libs_dir" "$cds_archive"
        mv "$tmp" "$libs_dir"
    ) 9>"$cache_dir/.lock"
}

classpath() {
    resolve_jars
    find "$libs_dir" -maxdepth 1 -name '*.jar' | sort | paste -sd:
}

run_tool() {
    local cp
    cp="$(classpath)"
    # shellcheck disable=SC2086 # the option strings are word lists on purpose
    exec "$java_bin" $jvm_opts -Xmx512m -Dlog4j2.configurationFile="$here/log4j2-tools.properties" \
        -cp "$cp" "$@"
}

# --- layout --------------------------------------------------------------------------------------

client_port() { echo $(($1 + 2 * ($2 - 1))); }
controller_port() { echo $(($1 + 2 * ($2 - 1) + 1)); }
cluster_dir() { echo "$run_root/$1"; }
node_dir() { echo "$run_root/$1/n$2"; }

node_count() {
    local file
    file="$(cluster_dir "$1")/nodes"
    [ -f "$file" ] || die "no cluster on port $1 (nothing in $(cluster_dir "$1"))"
    cat "$file"
}

bootstrap_of() {
    local port=$1 nodes=$2 i out=""
    for ((i = 1; i <= nodes; i++)); do
        out="${out:+$out,}127.0.0.1:$(client_port "$port" "$i")"
    done
    echo "$out"
}

voters_of() {
    local port=$1 nodes=$2 i out=""
    for ((i = 1; i <= nodes; i++)); do
        out="${out:+$out,}$i@127.0.0.1:$(controller_port "$port" "$i")"
    done
    echo "$out"
}

node_pid() {
    local file
    file="$(node_dir "$1" "$2")/pid"
    [ -f "$file" ] && cat "$file"
    return 0
}

node_running() {
    local pid
    pid="$(node_pid "$1" "$2")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q 'kafka\.Kafka' "/proc/$pid/cmdline" 2>/dev/null
}

write_properties() {
    local port=$1 nodes=$2 node=$3 dir rf isr
    dir="$(node_dir "$port" "$node")"
    rf=$((nodes >= 3 ? 3 : 1))
    isr=$((nodes >= 3 ? 2 : 1))
    mkdir -p "$dir/data" "$dir/logs"
    cat >"$dir/server.properties" <<EOF
# Written by tools/kafka/kafka.sh: node $node of $nodes, static KRaft quorum, loopback only.
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$(voters_of "$port" "$nodes")
listeners=PLAINTEXT://127.0.0.1:$(client_port "$port" "$node"),CONTROLLER://127.0.0.1:$(controller_port "$port" "$node")
advertised.listeners=PLAINTEXT://127.0.0.1:$(client_port "$port" "$node")
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
default.replication.factor=$rf
offsets.topic.num.partitions=1
transaction.state.log.num.partitions=1
num.partitions=1
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
# Notice a dead broker within seconds (fault tests), without fencing a busy one on 2 cores.
broker.session.timeout.ms=6000
broker.heartbeat.interval.ms=1000
# Small-machine thread counts and an on-heap cleaner buffer that fits a 512 MiB heap.
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
num.replica.fetchers=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
log.cleaner.backoff.ms=1000
# Apply topic retention (retention.ms) within a second, not the default 5 minutes: the tests of
# followers bootstrapping after retention deleted a topic's start need it to happen in seconds.
log.retention.check.interval.ms=1000
EOF
}

format_node() {
    local port=$1 node=$2 cid=$3 cp=$4 dir
    dir="$(node_dir "$port" "$node")"
    [ -f "$dir/data/meta.properties" ] && return 0
    local cds_opts=""
    [ -f "$cds_archive" ] && cds_opts="-XX:SharedArchiveFile=$cds_archive -Xlog:cds=off"
    # shellcheck disable=SC2086
    "$java_bin" $jvm_opts $cds_opts -Xmx256m -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile="$here/log4j2-tools.properties" -cp "$cp" \
        kafka.tools.StorageTool format -t "$cid" -c "$dir/server.properties" \
        >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "formatting node $node failed"; }
}

# Waits until nothing holds the node's two ports. A node restarted on the ports it had may find
# them briefly taken, e.g. by a client socket still retrying the dead node; the JVM would fail to
# bind and exit instead of waiting.
wait_ports_free() {
    local port=$1 node=$2 timeout_s=30
    "$(python_bin)" - "$(client_port "$port" "$node")" "$(controller_port "$port" "$node")" \
        "$timeout_s" <<'EOF' || die "node $node: its ports are still in use after ${timeout_s}s"
import socket, sys, time

ports, deadline = [int(p) for p in sys.argv[1:3]], time.monotonic() + float(sys.argv[3])
while True:
    busy = []
    for port in ports:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    if not busy:
        sys.exit(0)
    if time.monotonic() > deadline:
        print(f"kafka.sh: ports {busy} still in use", file=sys.stderr)
        sys.exit(1)
    time.sleep(0.2)
EOF
}

launch_node() {
    local port=$1 node=$2 cp=$3 dir pid
    dir="$(node_dir "$port" "$node")"
    if node_running "$port" "$node"; then return 0; fi
    wait_ports_free "$port" "$node"
    : >"$dir/node.log"
    local cds_opts="-XX:+RecordDynamicDumpInfo"
    [ -f "$cds_archive" ] && cds_opts="-XX:SharedArchiveFile=$cds_archive -Xlog:cds=off"
    # setsid: the broker outlives this script and the caller's process group. Not a group leader
    # here (no job control), so setsid execs in place and $! is the JVM's own PID.
    # shellcheck disable=SC2086
    setsid "$java_bin" $heap_opts $jvm_opts $cds_opts -Dkafka.logs.dir="$dir/logs" \
        -Dlog4j2.configurationFile="$here/log4j2-broker.properties" -cp "$cp" \
        kafka.Kafka "$dir/server.properties" >>"$dir/node.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/pid"
    say "node $node started (pid $pid, client port $(client_port "$port" "$node"), log $dir/node.log)"
}

new_cluster_id() {
    "$(python_bin)" - <<'EOF'
import base64, uuid
while True:
    cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    if not cid.startswith("-"):
        print(cid)
        break
EOF
}

dump_cds_archive() {
    local port=$1 nodes i pid
    [ -f "$cds_archive" ] && return 0
    command -v jcmd >/dev/null || return 0
    nodes="$(node_count "$port")"
    for ((i = 1; i <= nodes; i++)); do
        node_running "$port" "$i" || continue
        pid="$(node_pid "$port" "$i")"
        grep -q 'RecordDynamicDumpInfo' "/proc/$pid/cmdline" 2>/dev/null || continue
        (
            flock -n 9 || exit 0
            local tmp="$cds_archive.tmp.$$"
            if jcmd "$pid" VM.cds dynamic_dump "$tmp" >/dev/null 2>&1 && [ -s "$tmp" ]; then
                mv -f "$tmp" "$cds_archive"
                say "saved a class-data archive for faster broker starts ($cds_archive)"
            else
                rm -f "$tmp"
                say "warning: no class-data archive (jcmd VM.cds dynamic_dump failed); starts stay slower"
            fi
        ) 9>"$cache_dir/.cds-lock"
        return 0
    done
}

# --- commands ------------------------------------------------------------------------------------

wait_ready() {
    local port=$1 timeout_s=$2 nodes deadline i dir alive
    nodes="$(node_count "$port")"
    deadline=$((SECONDS + timeout_s))
    for ((i = 1; i <= nodes; i++)); do
        dir="$(node_dir "$port" "$i")"
        until grep -q 'Kafka Server started' "$dir/node.log" 2>/dev/null; do
            alive=1
            node_running "$port" "$i" || alive=0
            if [ "$alive" = 0 ]; then
                [ -n "$(node_pid "$port" "$i")" ] || continue 2 # deliberately stopped node
                tail -n 30 "$dir/node.log" >&2 || true
                die "node $i exited before it was ready (log: $dir/node.log)"
            fi
            [ "$SECONDS" -lt "$deadline" ] || die "node $i not ready after ${timeout_s}s ($dir/node.log)"
            sleep 0.2
        done
    done
    local running=0
    for ((i = 1; i <= nodes; i++)); do node_running "$port" "$i" && running=$((running + 1)); done
    if "$(python_bin)" -c 'import aiokafka' 2>/dev/null; then
        "$(python_bin)" "$here/probe.py" "$(bootstrap_of "$port" "$nodes")" "$running" \
            "$((deadline - SECONDS > 5 ? deadline - SECONDS : 5))" ||
            die "the cluster on port $port does not answer metadata requests"
    fi
}

cmd_start() {
    local port=$1 nodes=$2 node=$3 fresh=$4 timeout_s=$5 dir cid cp i
    dir="$(cluster_dir "$port")"
    cp="$(classpath)"
    if [ -n "$node" ]; then
        nodes="$(node_count "$port")"
        launch_node "$port" "$node" "$cp"
        wait_ready "$port" "$timeout_s"
        bootstrap_of "$port" "$nodes"
        return 0
    fi
    if [ "$fresh" = 1 ] && [ -d "$dir" ]; then
        cmd_stop "$port" "" 1 1
    fi
    if [ -f "$dir/nodes" ] && [ "$(cat "$dir/nodes")" != "$nodes" ]; then
        die "port $port already holds a $(cat "$dir/nodes")-node cluster (use --fresh or another --port)"
    fi
    mkdir -p "$dir"
    echo "$nodes" >"$dir/nodes"
    [ -f "$dir/cluster-id" ] || new_cluster_id >"$dir/cluster-id"
    cid="$(cat "$dir/cluster-id")"
    local pids=()
    for ((i = 1; i <= nodes; i++)); do
        write_properties "$port" "$nodes" "$i"
        format_node "$port" "$i" "$cid" "$cp" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || die "formatting failed"; done
    # All nodes start together: each blocks until the controller quorum has a leader.
    for ((i = 1; i <= nodes; i++)); do launch_node "$port" "$i" "$cp"; done
    wait_ready "$port" "$timeout_s"
    dump_cds_archive "$port"
    say "ready: $nodes node(s), bootstrap $(bootstrap_of "$port" "$nodes")"
    bootstrap_of "$port" "$nodes"
}

stop_node() {
    local port=$1 node=$2 kill_now=$3 pid waited=0
    pid="$(node_pid "$port" "$node")"
    if [ -z "$pid" ] || ! node_running "$port" "$node"; then
        rm -f "$(node_dir "$port" "$node")/pid"
        return 0
    fi
    if [ "$kill_now" = 1 ]; then
        kill -KILL "$pid" 2>/dev/null || true
    else
        kill -TERM "$pid" 2>/dev/null || true
    fi
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$waited" -ge 300 ]; then
            say "node $node (pid $pid) ignored SIGTERM for 30s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    say "node $node (pid $pid) stopped"
    rm -f "$(node_dir "$port" "$node")/pid"
}

cmd_stop() {
    local port=$1 node=$2 kill_now=$3 clean=$4 dir nodes i
    dir="$(cluster_dir "$port")"
    [ -d "$dir" ] || { say "no cluster on port $port"; return 0; }
    nodes="$(node_count "$port")"
    if [ -n "$node" ]; then
        stop_node "$port" "$node" "$kill_now"
        # Keep an empty pid file: wait/status then know this node is down on purpose.
        : >"$(node_dir "$port" "$node")/pid"
        return 0
    fi
    # Stop all nodes at once; a controlled shutdown of the last ones may wait on the lost quorum.
    local pids=()
    for ((i = 1; i <= nodes; i++)); do
        stop_node "$port" "$i" "$kill_now" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || true; done
    if [ "$clean" = 1 ]; then
        rm -rf "$dir"
        say "removed $dir"
    fi
}

cmd_status() {
    local port=$1 nodes i ok=0 pid
    nodes="$(node_count "$port")"
    for ((i = 1; i <= nodes; i++)); do
        pid="$(node_pid "$port" "$i")"
        if node_running "$port" "$i"; then
            echo "node $i: running (pid $pid) 127.0.0.1:$(client_port "$port" "$i")" >&2
        else
            echo "node $i: stopped" >&2
            ok=1
        fi
    done
    bootstrap_of "$port" "$nodes"
    return "$ok"
}

main() {
    [ $# -ge 1 ] || die "usage: kafka.sh start|stop|status|wait|tool|classpath [options]"
    local cmd=$1
    shift
    case "$cmd" in
    tool)
        [ $# -ge 1 ] || die "usage: kafka.sh tool CLASS [ARGS...]"
        run_tool "$@"
        ;;
    classpath)
        classpath
        return 0
        ;;
    esac
    local port=19092 nodes=1 node="" fresh=0 kill_now=0 clean=0 timeout_s=120
    while [ $# -gt 0 ]; do
        case "$1" in
        --port) port=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --node) node=$2; shift 2 ;;
        --timeout-s) timeout_s=$2; shift 2 ;;
        --fresh) fresh=1; shift ;;
        --kill) kill_now=1; shift ;;
        --clean) clean=1; shift ;;
        *) die "unknown option $1" ;;
        esac
    done
    [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1024 ] && [ "$port" -le 65000 ] ||
        die "--port must be a number in 1024..65000, got $port"
    [ "$nodes" = 1 ] || [ "$nodes" = 3 ] || die "--nodes must be 1 or 3, got $nodes"
    [ -z "$node" ] || [[ "$node" =~ ^[1-3]$ ]] || die "--node must be 1, 2 or 3, got $node"
    [[ "$timeout_s" =~ ^[0-9]+$ ]] || die "--timeout-s must be a whole number of seconds"
    case "$cmd" in
    start) cmd_start "$port" "$nodes" "$node" "$fresh" "$timeout_s" ;;
    stop) cmd_stop "$port" "$node" "$kill_now" "$clean" ;;
    status) cmd_status "$port" ;;
    wait) wait_ready "$port" "$timeout_s" && bootstrap_of "$port" "$(node_count "$port")" ;;
    *) die "unknown command $cmd (start|stop|status|wait|tool|classpath)" ;;
    esac
}

main "$@"
