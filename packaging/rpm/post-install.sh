# gShare Edge: enabled by preset policy, never started by the package; review /etc/gshare/config.toml first.
install -d -m 0700 -o gshare -g gshare /var/lib/gshare
chown root:gshare /etc/gshare /etc/gshare/config.toml
chmod 0750 /etc/gshare
chmod 0640 /etc/gshare/config.toml
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
    if [ "$1" -eq 1 ]; then
        systemctl preset gshare.service >/dev/null 2>&1 || :
        echo "gShare Edge installed. Review /etc/gshare/config.toml, then: systemctl start gshare"
    else
        systemctl try-restart gshare.service >/dev/null 2>&1 || :
    fi
fi
