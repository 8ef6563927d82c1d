#!/bin/sh
# Installs, upgrades, removes, reinstalls and purges the .deb given as $1
# with dpkg, checking what each step leaves. release_test.go runs it as
# root in a throw-away copy of the machine's root (an overlay in a mount
# namespace), so nothing here touches the machine. Without systemd running
# the service is not started; enabling and masking are files, checked here.
set -eu
deb=$1
wants=/etc/systemd/system/multi-user.target.wants/mqttd.service
fail() {
	echo "FAIL: $*"
	exit 1
}

dpkg -i "$deb"
getent passwd mqttd | grep -q ':/var/lib/mqttd:/usr/sbin/nologin$' || fail "no mqttd system user"
[ -L $wants ] || fail "not enabled by the install"
/usr/bin/mqttd version | grep -q '^mqttd v' || fail "mqttd version"

echo '# an edit' >>/etc/mqttd/mqttd.yaml
dpkg -i "$deb" # again, as an upgrade does
tail -n 1 /etc/mqttd/mqttd.yaml | grep -q '^# an edit$' || fail "the upgrade lost an edit to the config"
[ -L $wants ] || fail "not enabled after the upgrade"
systemctl disable mqttd.service
dpkg -i "$deb"
[ ! -L $wants ] || fail "an upgrade enabled the service the admin had disabled"
systemctl enable mqttd.service

dpkg -r mqttd
[ ! -e /usr/bin/mqttd ] || fail "the binary is left after removal"
[ -f /etc/mqttd/mqttd.yaml ] || fail "removal deleted the config"
[ "$(readlink /etc/systemd/system/mqttd.service)" = /dev/null ] || fail "not masked after removal"
dpkg -i "$deb"
[ ! -L /etc/systemd/system/mqttd.service ] || fail "still masked after reinstalling"
[ -L $wants ] || fail "not enabled again after reinstalling"

mkdir -p /var/lib/mqttd
touch /var/lib/mqttd/mqttd.db
dpkg --purge mqttd
for f in /etc/mqttd /var/lib/mqttd /lib/systemd/system/mqttd.service /etc/systemd/system/mqttd.service $wants; do
	[ ! -e $f ] && [ ! -L $f ] || fail "$f is left after purge"
done
echo "lifecycle ok"
