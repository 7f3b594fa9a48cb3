# gShare Edge: stop and disable on erase (not on upgrade).
if [ "$1" -eq 0 ] && [ -d /run/systemd/system ]; then
    systemctl --no-reload disable --now gshare.service >/dev/null 2>&1 || :
fi
