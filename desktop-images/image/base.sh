#!/bin/bash
# Base stage of the deskbox guest image: debootstrap + packages + kernel/initramfs + trim.
#
#   base.sh TREE MIRROR_URI APT_SOURCES_FILE
#
# TREE must be an empty (or absent) directory; MIRROR_URI is the Debian archive URI used by
# debootstrap; APT_SOURCES_FILE is a deb822 .sources file written into the guest for the
# package install (bookworm, -updates, -security as found on the build host).
# Reads `packages` and `initramfs-modules` from its own directory. build-image keys the base
# tarball on the content of this file, `packages` and `initramfs-modules`: anything that
# changes the base tree belongs here, anything else in the final stage (build-image).
#
# /proc, /sys, /dev, /dev/pts and /run are mounted inside TREE only while packages install,
# and always unmounted on exit. /dev is a private tmpfs with a handful of nodes (never a bind
# of the host's /dev, so a stray rm -rf of TREE cannot reach host device nodes).
set -euo pipefail

TREE=${1:?usage: base.sh TREE MIRROR_URI APT_SOURCES_FILE}
MIRROR=${2:?mirror uri}
SOURCES=${3:?apt sources file}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SUITE=bookworm
GUEST_USER=desk
GUEST_UID=1000

log() { printf 'base: %s\n' "$*" >&2; }

chroot_mounts=()
umount_chroot() {
	local i
	for ((i = ${#chroot_mounts[@]} - 1; i >= 0; i--)); do
		umount "${chroot_mounts[i]}" 2>/dev/null || umount -l "${chroot_mounts[i]}" 2>/dev/null || true
	done
	chroot_mounts=()
	# debootstrap mounts proc/sys itself and may leave them behind when it fails
	local m
	for m in $(awk -v t="$TREE/" 'index($2, t) == 1 { print $2 }' /proc/self/mounts | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
}
trap umount_chroot EXIT

mount_chroot() {
	mount -t proc -o nosuid,nodev,noexec proc "$TREE/proc"; chroot_mounts+=("$TREE/proc")
	mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$TREE/sys"; chroot_mounts+=("$TREE/sys")
	mount -t tmpfs -o mode=0755,nosuid,size=16m devtmp "$TREE/dev"; chroot_mounts+=("$TREE/dev")
	mknod -m 0666 "$TREE/dev/null" c 1 3
	mknod -m 0666 "$TREE/dev/zero" c 1 5
	mknod -m 0666 "$TREE/dev/full" c 1 7
	mknod -m 0666 "$TREE/dev/random" c 1 8
	mknod -m 0666 "$TREE/dev/urandom" c 1 9
	mknod -m 0666 "$TREE/dev/tty" c 5 0
	mkdir -m 0755 "$TREE/dev/pts" "$TREE/dev/shm"
	ln -s /proc/self/fd "$TREE/dev/fd"
	ln -s pts/ptmx "$TREE/dev/ptmx"
	mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$TREE/dev/pts"; chroot_mounts+=("$TREE/dev/pts")
	mount -t tmpfs -o mode=0755,nosuid,nodev,size=64m run "$TREE/run"; chroot_mounts+=("$TREE/run")
}

in_chroot() {
	chroot "$TREE" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
		DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true HOME=/root "$@"
}

mkdir -p "$TREE"
if [ -n "$(ls -A "$TREE")" ]; then
	log "$TREE is not empty"
	exit 1
fi

# ---------------------------------------------------------------- debootstrap
log "debootstrap --variant=minbase $SUITE from $MIRROR"
debootstrap --variant=minbase --components=main "$SUITE" "$TREE" "$MIRROR" >&2

# Never install docs, man pages or translations from now on (copyright files stay).
cat >"$TREE/etc/dpkg/dpkg.cfg.d/01-deskbox-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/groff/*
path-exclude=/usr/share/lintian/*
path-exclude=/usr/share/linda/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/en*
path-include=/usr/share/locale/locale.alias
EOF
cat >"$TREE/etc/apt/apt.conf.d/01-deskbox" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Dpkg::Options { "--force-confdef"; "--force-confold"; };
EOF
# No service may start inside the chroot (there is no init system at all in the guest).
printf '#!/bin/sh\nexit 101\n' >"$TREE/usr/sbin/policy-rc.d"
chmod 0755 "$TREE/usr/sbin/policy-rc.d"

rm -f "$TREE/etc/apt/sources.list"
install -m 0644 "$SOURCES" "$TREE/etc/apt/sources.list.d/debian.sources"
cp -L /etc/resolv.conf "$TREE/etc/resolv.conf"

# ---------------------------------------------------------------- packages
mapfile -t PKGS < <(sed -e 's/#.*//' -e 's/[[:space:]]\+//g' -e '/^$/d' "$HERE/packages")
log "installing ${#PKGS[@]} packages: ${PKGS[*]}"
mount_chroot
in_chroot apt-get -q update >&2
in_chroot apt-get -q -y dist-upgrade >&2
in_chroot apt-get -q -y install --no-install-recommends "${PKGS[@]}" >&2

# ---------------------------------------------------------------- user, basic config
in_chroot useradd --create-home --uid "$GUEST_UID" --user-group --shell /bin/bash "$GUEST_USER"
in_chroot passwd --lock root >/dev/null
tr -d '-' </proc/sys/kernel/random/uuid >"$TREE/etc/machine-id"
mkdir -p "$TREE/var/lib/dbus"
ln -sf /etc/machine-id "$TREE/var/lib/dbus/machine-id"

# ---------------------------------------------------------------- trim
log "trimming"
in_chroot apt-get -q -y autoremove --purge >&2 || true
in_chroot apt-get clean
rm -rf "$TREE"/var/lib/apt/lists/* "$TREE"/var/cache/apt/*.bin "$TREE"/var/cache/apt/archives/partial
find "$TREE/usr/share/doc" -mindepth 1 \( -type f -o -type l \) ! -name copyright -delete 2>/dev/null || true
find "$TREE/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$TREE"/usr/share/man/* "$TREE"/usr/share/info/* "$TREE"/usr/share/groff/* \
	"$TREE"/usr/share/lintian/* "$TREE"/usr/share/linda/* "$TREE"/usr/share/bug
find "$TREE/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'en*' ! -name locale.alias \
	-exec rm -rf {} + 2>/dev/null || true
# Chromium UI translations: keep English only.
if [ -d "$TREE/usr/lib/chromium/locales" ]; then
	find "$TREE/usr/lib/chromium/locales" -type f ! -name 'en-US.*' ! -name 'en-GB.*' -delete
fi
rm -rf "$TREE"/var/cache/debconf/*-old "$TREE"/var/lib/dpkg/*-old "$TREE"/var/cache/man
find "$TREE/var/log" -type f -delete
rm -rf "$TREE"/tmp/* "$TREE"/var/tmp/* "$TREE"/root/.cache

# Kernel modules: drop hardware classes a microvm never has. Kept: virtio, block, char,
# net core + netfilter, tun/veth, crypto, lib, fs (common filesystems), md/dm.
for moddir in "$TREE"/lib/modules/*/; do
	k="$moddir/kernel"
	for d in \
		sound drivers/gpu drivers/media drivers/infiniband drivers/net/wireless \
		drivers/net/ethernet drivers/net/can drivers/net/usb drivers/net/wwan \
		drivers/net/ieee802154 drivers/net/hamradio drivers/net/arcnet drivers/net/fddi \
		drivers/net/plip drivers/net/wan drivers/net/dsa drivers/net/phy drivers/net/pcs \
		drivers/net/mdio drivers/net/fjes drivers/net/hyperv drivers/net/xen-netback \
		drivers/scsi drivers/staging drivers/usb drivers/bluetooth drivers/iio drivers/isdn \
		drivers/mtd drivers/hid drivers/input drivers/hwmon drivers/mmc drivers/ata \
		drivers/nvme drivers/target drivers/firewire drivers/thunderbolt drivers/video \
		drivers/platform drivers/leds drivers/edac drivers/watchdog drivers/w1 drivers/spi \
		drivers/i2c drivers/gnss drivers/pcmcia drivers/parport drivers/memstick drivers/nfc \
		drivers/atm drivers/ssb drivers/bcma drivers/mfd drivers/regulator drivers/extcon \
		drivers/pinctrl drivers/gpio drivers/ntb drivers/fpga drivers/soundwire \
		drivers/infiniband drivers/misc drivers/power drivers/ptp drivers/pps \
		drivers/crypto drivers/comedi drivers/uio drivers/vfio drivers/xen drivers/hv \
		drivers/cpufreq drivers/acpi/nfit drivers/dca drivers/dma drivers/fsi \
		drivers/most drivers/greybus drivers/counter drivers/rapidio drivers/siox \
		drivers/slimbus drivers/ipack drivers/mcb drivers/mux drivers/pwm drivers/ufs \
		drivers/accessibility drivers/auxdisplay drivers/mailbox drivers/cxl drivers/nvdimm \
		net/wireless net/mac80211 net/bluetooth net/nfc net/can net/ieee802154 net/mac802154 \
		net/6lowpan net/atm net/ax25 net/netrom net/rose net/x25 net/appletalk net/lapb \
		net/phonet net/9p net/ceph net/rds net/tipc net/l2tp net/batman-adv net/dsa \
		net/openvswitch net/mpls net/hsr net/qrtr net/smc net/caif net/rfkill net/wimax \
		fs/btrfs fs/xfs fs/ocfs2 fs/gfs2 fs/jfs fs/reiserfs fs/nilfs2 fs/f2fs fs/ceph \
		fs/ubifs fs/orangefs fs/afs fs/coda fs/dlm fs/ntfs3 fs/ntfs fs/hfs fs/hfsplus \
		fs/ufs fs/smb fs/cifs fs/ksmbd fs/nfs fs/nfsd fs/nfs_common fs/lockd fs/9p \
		fs/gfs2 fs/minix fs/omfs fs/qnx4 fs/qnx6 fs/romfs fs/sysv fs/befs fs/adfs \
		fs/affs fs/efs fs/hpfs fs/jffs2 fs/cramfs fs/erofs fs/zonefs fs/bfs fs/vboxsf; do
		rm -rf "${k:?}/$d"
	done
done

# ---------------------------------------------------------------- initramfs
# initramfs-tools-core depends on udev, but the guest runs without it: keep udevd out of the
# initramfs too (devtmpfs provides /dev/vda; MODULES=list loads the drivers).
for f in hooks/udev scripts/init-top/udev scripts/init-bottom/udev; do
	if [ -e "$TREE/usr/share/initramfs-tools/$f" ]; then
		in_chroot dpkg-divert --quiet --local --rename --divert "/usr/share/initramfs-tools/$f.deskbox-disabled" \
			--add "/usr/share/initramfs-tools/$f"
	fi
done
rm -f "$TREE/etc/udev/hwdb.bin" "$TREE/usr/lib/udev/hwdb.bin"
sed -i 's/^MODULES=.*/MODULES=list/' "$TREE/etc/initramfs-tools/initramfs.conf"
grep -q '^MODULES=list' "$TREE/etc/initramfs-tools/initramfs.conf"
sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$HERE/initramfs-modules" >>"$TREE/etc/initramfs-tools/modules"
for moddir in "$TREE"/lib/modules/*/; do
	kver=$(basename "$moddir")
	in_chroot depmod -a "$kver"
	in_chroot update-initramfs -u -k "$kver" >&2
done

# ---------------------------------------------------------------- finish
umount_chroot
rm -f "$TREE/usr/sbin/policy-rc.d"
rm -rf "$TREE"/run/* "$TREE"/tmp/* "$TREE"/var/cache/apt/*.bin "$TREE"/var/log/*.log \
	"$TREE"/var/log/apt/* "$TREE"/root/.cache "$TREE"/root/.bash_history
: >"$TREE/etc/resolv.conf"
log "base tree done: $(du -sh "$TREE" | cut -f1)"
