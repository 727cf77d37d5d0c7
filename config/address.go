package config

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Network addresses as a providers file writes them (a kvm host's address, a target of a host
// file, an item of Fields.Addresses): host, host:port, [v6] or [v6]:port, where host is a DNS
// name or an IP address. An IPv6 address goes in brackets, so that its last group is never
// taken for a port.

// ParseAddress parses addr. port is defaultPort when addr carries none; with defaultPort 0 a
// port is required. problem says what is wrong, in the form of a reader's problem ("invalid
// address "x": why (allowed: ...)"); "" when addr is valid.
func ParseAddress(addr string, defaultPort int) (host string, port int, problem string) {
	allowed := " (allowed: host, host:port or [v6]:port)"
	if defaultPort == 0 {
		allowed = " (allowed: host:port or [v6]:port)"
	}
	bad := func(why string) (string, int, string) {
		return "", 0, "invalid address " + quote(addr) + ": " + why + allowed
	}
	var portText string
	hasPort := false
	switch {
	case strings.HasPrefix(addr, "["):
		end := strings.IndexByte(addr, ']')
		if end < 0 {
			return bad("missing ']'")
		}
		host = addr[1:end]
		rest := addr[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return bad("unexpected text after ']'")
			}
			hasPort, portText = true, rest[1:]
		}
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() {
			return bad("not an IPv6 address in brackets")
		}
	case strings.Count(addr, ":") > 1:
		// Without brackets fd00::1:22 could be a port or the last group of the address.
		return bad("an IPv6 address goes in brackets, [v6] or [v6]:port")
	case strings.Contains(addr, ":"):
		i := strings.IndexByte(addr, ':')
		host, hasPort, portText = addr[:i], true, addr[i+1:]
		if p := hostProblem(host); p != "" {
			return bad(p)
		}
	default:
		host = addr
		if p := hostProblem(host); p != "" {
			return bad(p)
		}
	}
	if !hasPort {
		if defaultPort == 0 {
			return bad("no port")
		}
		return host, defaultPort, ""
	}
	n, err := strconv.Atoi(portText)
	if err != nil || strings.ContainsAny(portText, "+-") || n < 1 || n > 65535 {
		return bad("port " + quote(portText) + " is not a number from 1 to 65535")
	}
	return host, n, ""
}

// DialAddress is addr as host:port to dial, with defaultPort when addr carries none; addr as
// written when it does not parse (dialling it gives the dialer's own error).
func DialAddress(addr string, defaultPort int) string {
	host, port, problem := ParseAddress(addr, defaultPort)
	if problem != "" {
		return addr
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// hostProblem checks a host name or IPv4 address.
func hostProblem(host string) string {
	if host == "" {
		return "empty host"
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if len(host) > 253 {
		return "host name longer than 253 characters"
	}
	allDigits := true
	for label := range strings.SplitSeq(host, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "not a valid host name or IP address"
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return "not a valid host name or IP address"
			}
			if c < '0' || c > '9' {
				allDigits = false
			}
		}
	}
	if allDigits {
		return "not a valid IPv4 address"
	}
	return ""
}

// LoopbackHost reports whether host (a URL's host name, without port or brackets) is this
// machine: "localhost" or a loopback IP address. A plain-HTTP endpoint that carries credentials
// is refused unless its host is one (or the provider opts out explicitly): nothing leaves the
// machine in clear.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
