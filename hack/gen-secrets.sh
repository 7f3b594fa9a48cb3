#!/usr/bin/env bash
# Generate an RS256 signing key for operator tokens, for admins who keep the key outside the data
# directory: writes the PEM and a configuration snippet that uses it (both 0600; the key is never
# printed).
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: OUT=/etc/gshare/internal-jwt.pem [KID=gshare-YYYYMMDD] [BITS=3072] hack/gen-secrets.sh

  OUT   where to write the private key (PEM, mode 0600); existing files are not overwritten
  KID   optional: the key id operators' tokens carry (default: gshare-<UTC date>)
  BITS  optional: RSA size, at least 2048 (default 3072)
Also writes OUT.toml, the internal_jwt_private_key / internal_jwt_kid lines to merge into
/etc/gshare/config.toml. Prints the KID.
USAGE
}

case "${1:-}" in -h|--help) usage; exit 0 ;; "") ;; *) usage >&2; exit 2 ;; esac
if [ -z "${OUT:-}" ]; then
  echo "gen-secrets.sh: OUT is not set (see --help)" >&2
  exit 1
fi
KID="${KID:-gshare-$(date -u +%Y%m%d)}"
BITS="${BITS:-3072}"
case "$KID" in *[!A-Za-z0-9._-]*|"") echo "gen-secrets.sh: KID may use A-Z a-z 0-9 - _ . only" >&2; exit 1 ;; esac
case "$BITS" in ''|*[!0-9]*) echo "gen-secrets.sh: BITS must be a number" >&2; exit 1 ;; esac
[ "$BITS" -ge 2048 ] || { echo "gen-secrets.sh: BITS must be at least 2048" >&2; exit 1; }
for f in "$OUT" "$OUT.toml"; do
  if [ -e "$f" ]; then
    echo "gen-secrets.sh: $f exists; not overwriting it" >&2
    exit 1
  fi
done
umask 077
openssl genpkey -algorithm RSA -pkeyopt "rsa_keygen_bits:$BITS" -out "$OUT" 2>/dev/null
chmod 600 "$OUT"
{
  echo 'internal_jwt_private_key = """'
  cat "$OUT"
  echo '"""'
  echo "internal_jwt_kid = \"$KID\""
} >"$OUT.toml"
chmod 600 "$OUT.toml"
echo "wrote $OUT and $OUT.toml: merge the latter into /etc/gshare/config.toml" >&2
echo "$KID"
