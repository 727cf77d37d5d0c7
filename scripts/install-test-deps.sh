#!/usr/bin/env bash
# Installs the Debian packages the integration tests need, when they are missing.
#
#   scripts/install-test-deps.sh [extra-package...]
#
# As root on a Debian machine with apt-get, it installs what is missing without starting any
# of the installed services (the tests start their own daemons). Anywhere else it prints what
# is missing and how to install it, and exits 0: the tests that need a missing part then skip
# with a message, or fail under REQUIRE_INTEGRATION=1.
set -euo pipefail

# The one list of Debian packages the tests need. Extra packages may be given as arguments.
PACKAGES=(
	libvirt-daemon-system
	libvirt-clients
	openssh-server
	openssh-client
	iproute2
	iptables
	procps
	chromium # headless, renders the status page in exporter/landing_test.go
	ca-certificates # the image's base (make image, release/image_test.go)
	tzdata # the image's base
	containerd # the one-node cluster's container runtime (make cluster, test/testenv/cluster)
	runc
	containernetworking-plugins # the cluster's pod network (bridge, host-local, portmap, loopback)
)

# Pid files of the services these packages ship, to catch one started despite policy-rc.d.
SERVICE_PIDFILES=(
	/run/sshd.pid
	/run/libvirtd.pid
	/run/virtlogd.pid
	/run/virtlockd.pid
)

POLICY_RC=/usr/sbin/policy-rc.d

log() { printf 'install-test-deps: %s\n' "$*"; }

PACKAGES+=("$@")

if ! command -v dpkg-query >/dev/null 2>&1; then
	log "no dpkg-query: not a Debian system; install the equivalents of: ${PACKAGES[*]}"
	exit 0
fi

installed() {
	[[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

missing=()
for p in "${PACKAGES[@]}"; do
	installed "$p" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
	log "all ${#PACKAGES[@]} packages already installed, nothing to do"
	exit 0
fi

if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
	log "missing Debian packages: ${missing[*]}"
	log "install them as root: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
	log "until then the integration tests that need them skip (or fail with REQUIRE_INTEGRATION=1)"
	exit 0
fi

# live_pid FILE prints the pid in FILE when that process is running.
live_pid() {
	local pid
	[[ -r "$1" ]] || return 0
	pid="$(tr -dc '0-9' <"$1")"
	[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && printf '%s\n' "$pid"
	return 0
}

declare -A pid_before=()
for f in "${SERVICE_PIDFILES[@]}"; do
	pid_before["$f"]="$(live_pid "$f")"
done

# Debian's maintainer scripts start services through invoke-rc.d (and deb-systemd-invoke),
# which ask policy-rc.d first; exit status 101 means "do not start". Any existing policy is
# kept aside and put back afterwards.
policy_backup=""
restore_policy() {
	if [[ -n "$policy_backup" ]]; then
		mv -f "$policy_backup" "$POLICY_RC"
	else
		rm -f "$POLICY_RC"
	fi
}
if [[ -e "$POLICY_RC" ]]; then
	policy_backup="$(mktemp "$POLICY_RC.install-test-deps.XXXXXX")"
	cp -p "$POLICY_RC" "$policy_backup"
fi
trap restore_policy EXIT
trap 'exit 130' INT TERM HUP
printf '#!/bin/sh\n# Written by install-test-deps.sh while it installs packages: start no service.\nexit 101\n' >"$POLICY_RC"
chmod 0755 "$POLICY_RC"

log "installing: ${missing[*]}"
status=0
if ! apt-get update -q; then
	log "apt-get update failed; trying to install from the current package lists"
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" || status=$?

# A service started in spite of the policy belongs to this install, not to any test: stop it.
for f in "${SERVICE_PIDFILES[@]}"; do
	pid="$(live_pid "$f")"
	if [[ -n "$pid" && "$pid" != "${pid_before[$f]}" ]]; then
		log "stopping pid $pid ($f), a service the install started"
		kill "$pid" 2>/dev/null || true
	fi
done

failed=()
for p in "${missing[@]}"; do
	installed "$p" || failed+=("$p")
done
if ((${#failed[@]} > 0)); then
	log "could not install: ${failed[*]} (apt-get exit status $status)"
	log "the integration tests that need them skip (or fail with REQUIRE_INTEGRATION=1)"
	# Under CI a missing part is a failure anyway: say so now rather than per test.
	if [[ "${REQUIRE_INTEGRATION:-}" == "1" ]]; then
		exit 1
	fi
	exit 0
fi
log "installed: ${missing[*]}"
