#!/usr/bin/env bash
# Re-captures the TLS and nginx fixtures of this directory from local servers on 127.0.0.1.
# Loopback only: nothing leaves the host. Needs openssl, nginx, python3 and a built
# `request` example (cargo build -p sonde-apps --example request). New certificates make new
# bytes: update the expected digests and dates in src/tls/tests.rs after re-capturing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
request="$here/../../../target/debug/examples/request"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# A test CA, a leaf it signs (RSA), and a self-signed ECDSA P-256 certificate.
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 \
    -subj "/C=DE/O=Sonde Lab/CN=Sonde Lab Test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
openssl req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr \
    -subj "/C=DE/O=Sonde Lab/CN=sonde.test"
printf 'subjectAltName=DNS:sonde.test,DNS:www.sonde.test,IP:198.18.0.7,IP:2001:2::7\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >leaf.ext
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem \
    -days 825 -extfile leaf.ext
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ec.key \
    -out ec.pem -days 365 -subj "/CN=self-signed.sonde.test" \
    -addext "subjectAltName=DNS:self-signed.sonde.test"

"$request" tls 127.0.0.1 443 1.2 sonde.test >hello12.bin
"$request" tls 127.0.0.1 443 1.3 sonde.test >hello13.bin
"$request" tls 127.0.0.1 443 1.2 >hello12_nosni.bin

# capture NAME PORT HELLO s_server-options...: one connection, the server's flight saved.
capture() {
    local name=$1 port=$2 hello=$3
    shift 3
    (sleep 4 | openssl s_server -accept "127.0.0.1:$port" -naccept 1 "$@" >"$name.log" 2>&1) &
    sleep 0.7
    python3 "$here/capture.py" "$port" "$hello" "$here/$name.bin"
    wait
}
capture tls12_rsa_chain 44301 hello12.bin -cert leaf.pem -key leaf.key -cert_chain ca.pem
capture tls13_rsa 44302 hello13.bin -cert leaf.pem -key leaf.key -cert_chain ca.pem
capture tls12_ecdsa_selfsigned 44303 hello12_nosni.bin -cert ec.pem -key ec.key
capture tls12_alert_handshake_failure 44304 hello12.bin -cert leaf.pem -key leaf.key \
    -no_tls1_3 -cipher DHE-RSA-AES256-SHA256
capture tls13_hello_retry 44306 hello13.bin -cert ec.pem -key ec.key -groups P-256

# nginx: a static page (Content-Length), the same through sub_filter (chunked), a redirect.
mkdir -p ng/html ng/logs
cat >ng/html/index.html <<'HTML'
<!DOCTYPE html>
<html>
<head><title>sonde lab</title></head>
<body>
<h1>It works</h1>
<p>A static page served by nginx on loopback for a sonde test fixture.</p>
</body>
</html>
HTML
cp ng/html/index.html ng/html/filtered.html
sed "s#/tmp/fx/ng#$work/ng#g" "$here/nginx.conf" >ng/nginx.conf
nginx -p "$work/ng" -c "$work/ng/nginx.conf" &
nginx_pid=$!
sleep 1
"$request" http 127.0.0.1 44380 >get_index.bin
python3 "$here/capture.py" 44380 get_index.bin "$here/http_nginx_content_length.bin"
sed 's#GET / #GET /filtered.html #' get_index.bin >get_filtered.bin
python3 "$here/capture.py" 44380 get_filtered.bin "$here/http_nginx_chunked.bin"
sed 's#GET / #GET /moved #' get_index.bin >get_moved.bin
python3 "$here/capture.py" 44380 get_moved.bin "$here/http_nginx_301.bin"
kill "$nginx_pid"
wait "$nginx_pid" || true
