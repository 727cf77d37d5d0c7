package kvmstandin

import (
	"encoding/binary"
	"errors"
	"io"
	"time"
)

// The libvirt RPC protocol as far as the exporter's check uses it: program REMOTE, version 1,
// the procedures below. Values from libvirt's remote_protocol.x.
const (
	remoteProgram  = 0x20008086
	remoteVersion  = 1
	typeCall       = 0
	typeReply      = 1
	statusOK       = 0
	statusError    = 1
	headerLen      = 24
	maxPacket      = 4 << 20
	errNoStorePool = 49 // VIR_ERR_NO_STORAGE_POOL
	fromStorage    = 18 // VIR_FROM_STORAGE
	errLevelError  = 2

	procConnectOpen             = 1
	procConnectClose            = 2
	procConnectGetHostname      = 59
	procAuthList                = 66
	procStoragePoolLookupByName = 84
	procStoragePoolGetInfo      = 87
	procConnectGetLibVersion    = 157
)

// LibVersion is the library version the stand-in reports (major·10⁶ + minor·10³ + micro):
// a value no real libvirtd on this machine reports, so a verdict tells which one answered.
const LibVersion = 9_999_000

// xdr appends XDR encodings.
type xdr []byte

func (b xdr) u32(v uint32) xdr { return binary.BigEndian.AppendUint32(b, v) }
func (b xdr) u64(v uint64) xdr { return binary.BigEndian.AppendUint64(b, v) }
func (b xdr) str(s string) xdr {
	b = b.u32(uint32(len(s)))
	b = append(b, s...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// readString decodes an XDR string at the start of p.
func readString(p []byte) (string, bool) {
	if len(p) < 4 {
		return "", false
	}
	n := binary.BigEndian.Uint32(p)
	if uint64(n) > uint64(len(p)-4) {
		return "", false
	}
	return string(p[4 : 4+n]), true
}

// serveLibvirt answers libvirt RPCs on rw (a direct-streamlocal channel) until it ends or the
// client closes the connection. Every call is answered in order, after the host's RPC delay.
func (h *Host) serveLibvirt(rw io.ReadWriteCloser) error {
	defer rw.Close()
	var lenBuf [4]byte
	for {
		if _, err := io.ReadFull(rw, lenBuf[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(lenBuf[:])
		if n < 4+headerLen || n > maxPacket {
			return errors.New("malformed libvirt packet")
		}
		pkt := make([]byte, n-4)
		if _, err := io.ReadFull(rw, pkt); err != nil {
			return err
		}
		prog := binary.BigEndian.Uint32(pkt[0:])
		proc := binary.BigEndian.Uint32(pkt[8:])
		typ := binary.BigEndian.Uint32(pkt[12:])
		serial := binary.BigEndian.Uint32(pkt[16:])
		if prog != remoteProgram || typ != typeCall {
			continue // a stream or message the stand-in does not speak: ignored
		}
		h.rpcs.Add(1)
		if d := time.Duration(h.rpcDelay.Load()); d > 0 {
			time.Sleep(d)
		}
		status, body := h.answer(proc, pkt[headerLen:])
		reply := xdr(nil).u32(0).u32(remoteProgram).u32(remoteVersion).u32(proc).u32(typeReply).u32(serial).u32(status)
		reply = append(reply, body...)
		binary.BigEndian.PutUint32(reply, uint32(len(reply)))
		if _, err := rw.Write(reply); err != nil {
			return err
		}
		if proc == procConnectClose {
			return nil
		}
	}
}

// answer returns the status and body of the reply to one call.
func (h *Host) answer(proc uint32, args []byte) (uint32, []byte) {
	switch proc {
	case procAuthList:
		return statusOK, xdr(nil).u32(1).u32(0) // one method: REMOTE_AUTH_NONE
	case procConnectOpen, procConnectClose:
		return statusOK, nil
	case procConnectGetLibVersion:
		return statusOK, xdr(nil).u64(LibVersion)
	case procConnectGetHostname:
		return statusOK, xdr(nil).str(h.Hostname)
	case procStoragePoolLookupByName:
		name, ok := readString(args)
		if !ok || name != h.Pool {
			return statusError, remoteError(errNoStorePool, fromStorage, "Storage pool not found: no storage pool with matching name '"+name+"'")
		}
		body := xdr(nil).str(name)
		return statusOK, append(body, h.poolUUID[:]...)
	case procStoragePoolGetInfo:
		// libvirt's states: inactive 0, building 1, running 2, degraded 3, inaccessible 4; a
		// pool that is not running reports no sizes.
		switch h.Mode {
		case PoolInactive:
			return statusOK, xdr(nil).u32(0).u64(0).u64(0).u64(0)
		case PoolInaccessible:
			return statusOK, xdr(nil).u32(4).u64(0).u64(0).u64(0)
		}
		return statusOK, xdr(nil).u32(2).u64(h.PoolCapacity).u64(h.PoolAllocation).u64(h.PoolCapacity - h.PoolAllocation)
	}
	return statusError, remoteError(1, 0, "the scale stand-in does not implement this call")
}

// The sizes a stand-in host's pool reports, unless its fleet is Varied.
const (
	PoolCapacity   = 100 << 30
	PoolAllocation = 25 << 30
)

// remoteError encodes libvirt's remote_error: code, domain, message (optional string), level,
// dom (optional), str1-3 (optional), int1, int2, net (optional).
func remoteError(code, domain uint32, msg string) []byte {
	b := xdr(nil).u32(code).u32(domain).u32(1).str(msg).u32(errLevelError)
	b = b.u32(0)               // dom
	b = b.u32(0).u32(0).u32(0) // str1, str2, str3
	b = b.u32(0).u32(0)        // int1, int2
	return b.u32(0)            // net
}
