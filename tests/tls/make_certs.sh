#!/usr/bin/env bash
# Writes a throwaway PKI for the TLS tests into DIR (PEM, EC P-256, valid 2 days):
#   ca.pem                      the cluster's CA
#   server.pem server.key       a daemon's certificate, signed by ca.pem
#   client.pem client.key       a client's certificate, signed by ca.pem
#   rogue-ca.pem rogue.pem rogue.key   another CA, and a certificate it signed
#
#   tests/tls/make_certs.sh DIR
set -euo pipefail
dir=${1:?usage: make_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
command -v openssl >/dev/null || { echo "make_certs.sh: openssl not found (apt-get install openssl)" >&2; exit 2; }
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
ca() {  # name subject
  openssl req -x509 "${ec[@]}" -keyout "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" 2>/dev/null
}
leaf() {  # name ca subject
  openssl req "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$3" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" -days 2 \
    -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "ferry-test-ca"
leaf server ca "ferry-daemon"
leaf client ca "ferry-client"
ca rogue-ca "someone-else"
leaf rogue rogue-ca "rogue"
