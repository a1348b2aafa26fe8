#!/usr/bin/env bash
# tools/serve-cluster.sh N MODEL [--port P] [--dir DIR] [-- npu-forward serve options]
# N `npu-forward serve` replicas of MODEL on free loopback ports, and nginx (Debian's nginx-light) on
# 127.0.0.1:P (default 8080) balancing between them: least connections and proxy_next_upstream, so a
# request a dead or full (503) replica cannot take goes to another one, POSTs included (non_idempotent:
# a completion that got no answer yet is safe to repeat); when every replica is full the client gets the
# last one's 503 (Retry-After). No replica is ever marked down (max_fails=0): nginx counts a 503 as a
# failed attempt, and with max_fails=1 a burst past the queues took every idle replica out for
# fail_timeout, everything 502 meanwhile; a dead replica's refused connect on loopback costs next to
# nothing. Streams pass through unbuffered. Runs in the
# foreground until SIGTERM/SIGINT, then drains: nginx takes no new connection and passes the requests
# in flight to their end while the replicas finish them (their --shutdown-grace: a cut stream ends
# with their shutting_down error event), then everything stops. DIR (default: a temp dir)
# holds nginx.conf, the logs and `replicas` ("PID PORT" per line: the tests kill one).
# Exit: 2 usage, 4 a replica or nginx did not start, or P is already in use, or nginx ended by itself
# (named), 0 after a signal. Replicas still running 5 s past their --shutdown-grace after SIGTERM are killed.
set -euo pipefail
prog=serve-cluster
die() { echo "$prog: $2" >&2; exit "$1"; }
[ $# -ge 2 ] || die 2 "usage: tools/serve-cluster.sh N MODEL [--port P] [--dir DIR] [-- serve options]"
n=$1 model=$2
shift 2
port=8080 dir= extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --port | --dir) [ $# -ge 2 ] || die 2 "$1 needs a value"
      if [ "$1" = --port ]; then port=$2; else dir=$2; fi
      shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) die 2 "unknown option '$1'" ;;
  esac
done
[[ $n =~ ^[1-9][0-9]?$ ]] || die 2 "N: '$n' is not 1..99"
[[ $port =~ ^[1-9][0-9]{0,4}$ ]] && [ "$port" -le 65535 ] || die 2 "--port: '$port' is not 1..65535"
[ -r "$model" ] || die 2 "$model: not readable"
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || die 4 "nginx not found (apt-get install nginx-light)"
top=$(cd "$(dirname "$0")/.." && pwd)
export PATH="${OGAKIT_BUILD:-$top/build}/bin:$PATH"
# another process on 127.0.0.1:P would answer for nginx (whose bind fails): refused before starting
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die 4 "127.0.0.1:$port is already in use"; fi
pids=() ng=
# nginx and every replica go on every way out; the exit status is the one exit gave (the cleanup's
# last test failing, with --dir, made it 1 whatever it was)
cleanup() {
  local st=$? p
  trap - EXIT INT TERM
  set +e
  # nginx's graceful stop (QUIT: no new connections, the requests in flight proxied to their end; its TERM
  # cut them, and the replicas' drain reached nobody) while the replicas finish theirs
  [ -z "$ng" ] || kill -QUIT "$ng" 2>/dev/null
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  # replicas finish in-flight requests (their --shutdown-grace, 5 s unless passed): bounded by that
  # grace + 5 s, then SIGKILL
  local g=5 i
  for ((i = 0; i < ${#extra[@]}; i++)); do
    case ${extra[i]} in
      --shutdown-grace) g=${extra[i + 1]:-5} ;;
      --shutdown-grace=*) g=${extra[i]#*=} ;;
    esac
  done
  g=${g%%.*}
  [[ $g =~ ^[0-9]{1,5}$ ]] || g=5
  for _ in $(seq $(((g + 5) * 10))); do
    local alive=0
    for p in $ng "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] || break
    sleep 0.1
  done
  for p in $ng "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ -n "${own_dir:-}" ]; then rm -rf "$dir"; fi
  exit "$st"
}
trap cleanup EXIT
trap 'exit 0' INT TERM
if [ -z "$dir" ]; then
  dir=$(mktemp -d) || die 4 "cannot create a temp dir in ${TMPDIR:-/tmp}"
  own_dir=1
fi
mkdir -p "$dir/tmp" && : >"$dir/replicas" || die 4 "$dir: cannot write there"

ports=()
for i in $(seq "$n"); do
  # emptied here, not by the replica's own redirection: that one runs in the background, and the wait
  # below could read a --dir's earlier run ('ready:', then no port, or a dead replica's)
  : >"$dir/replica$i.log" || die 4 "$dir: cannot write there"
  npu-forward serve -m "$model" --port 0 "${extra[@]}" 2>>"$dir/replica$i.log" &
  pids+=($!)
done
for i in $(seq "$n"); do
  p=${pids[$((i - 1))]}
  for _ in $(seq 600); do
    grep -q 'ready:' "$dir/replica$i.log" && break
    kill -0 "$p" 2>/dev/null || break
    sleep 0.05
  done
  grep -q 'ready:' "$dir/replica$i.log" || { cat "$dir/replica$i.log" >&2; die 4 "replica $i did not start"; }
  rp=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9]*\) .*/\1/p' "$dir/replica$i.log" | head -1)
  ports+=("$rp")
  echo "$p $rp" >>"$dir/replicas"
done

{
  echo "worker_processes 1; daemon off; pid $dir/nginx.pid; error_log $dir/nginx.err warn;"
  [ "$(id -u)" = 0 ] && echo "user root;"
  echo "events { worker_connections 2048; }"
  echo "http {"
  echo "  access_log off;"
  for t in client_body proxy fastcgi uwsgi scgi; do echo "  ${t}_temp_path $dir/tmp/$t;"; done
  echo "  client_max_body_size 8m; client_body_buffer_size 8m;"
  echo "  upstream ogakit {"
  echo "    least_conn;"
  for rp in "${ports[@]}"; do echo "    server 127.0.0.1:$rp max_fails=0;"; done
  echo "    keepalive 64;"
  echo "  }"
  echo "  server {"
  echo "    listen 127.0.0.1:$port;"
  echo "    location / {"
  echo "      proxy_pass http://ogakit;"
  echo "      proxy_http_version 1.1; proxy_set_header Connection \"\";"
  echo "      proxy_buffering off; proxy_read_timeout 600s; proxy_connect_timeout 2s;"
  echo "      proxy_next_upstream error timeout http_502 http_503 non_idempotent;"
  echo "    }"
  echo "  }"
  echo "}"
} >"$dir/nginx.conf"
"$nginx" -t -c "$dir/nginx.conf" -p "$dir" 2>"$dir/nginx.err" || { cat "$dir/nginx.err" >&2; die 4 "nginx: bad configuration"; }
"$nginx" -c "$dir/nginx.conf" -p "$dir" 2>>"$dir/nginx.err" &
ng=$!
up=0
for _ in $(seq 100); do
  kill -0 "$ng" 2>/dev/null || break
  curl -s -m 2 -o /dev/null "http://127.0.0.1:$port/health" && kill -0 "$ng" 2>/dev/null && { up=1; break; }
  sleep 0.05
done
[ "$up" = 1 ] || { cat "$dir/nginx.err" >&2; die 4 "nginx did not start on 127.0.0.1:$port"; }
echo "$prog: nginx on http://127.0.0.1:$port -> ${ports[*]} (dir $dir)" >&2
# until a signal (exit 0); nginx ending by itself is a failure
wait "$ng" || true
ng=
cat "$dir/nginx.err" >&2
die 4 "nginx exited"
