# gShare Edge: the service account (systemd-sysusers when present).
if command -v systemd-sysusers >/dev/null 2>&1; then
    printf 'u gshare - "gShare Edge control plane" /var/lib/gshare /usr/sbin/nologin\n' | systemd-sysusers -
elif ! getent passwd gshare >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/gshare --no-create-home --shell /sbin/nologin gshare
fi
