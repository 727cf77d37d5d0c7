package hostpool

import (
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/provider-health-exporter/provider-health-exporter/internal/redact"
)

// serve is the link's one goroutine: it answers the host's global requests (OpenSSH sends
// hostkeys-00@openssh.com after authentication) and the requests on the link's libvirt channel
// with a refusal, refuses every channel the host opens, and once the connection has ended
// closes l.done and unregisters the link. Requests left unread would stall the whole link.
func (p *Pool) serve(l *link, reqs <-chan *ssh.Request, chans <-chan ssh.NewChannel) {
	var chanReqs <-chan *ssh.Request
	for reqs != nil || chans != nil {
		select {
		case r, ok := <-reqs:
			if !ok {
				reqs = nil
			} else if r.WantReply {
				_ = r.Reply(false, nil)
			}
		case nc, ok := <-chans:
			if !ok {
				chans = nil
			} else {
				_ = nc.Reject(ssh.Prohibited, "the provider-health-exporter accepts no channels")
			}
		case cr := <-l.channelRequests:
			chanReqs = cr // the previous libvirt channel is closed
		case r, ok := <-chanReqs:
			if !ok {
				chanReqs = nil
			} else if r.WantReply {
				_ = r.Reply(false, nil)
			}
		}
	}
	err := l.conn.Wait()
	close(l.done)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
	p.local.links.Add(-1)
	p.stats.links.Add(-1)
	p.logger.Debug("ssh link closed", "hostpool", p.opts.Name, "addr", l.addr, "link", l.id, "err", redact.Err(err))
}

// keepaliveLoop checks every link of the pool every KeepaliveInterval, and a link at once when
// a probe on it was abandoned (checkNow), until the pool closes. One loop for the whole pool.
func (p *Pool) keepaliveLoop() {
	t := time.NewTicker(p.opts.KeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-p.closing:
			return
		case l := <-p.checkNow:
			p.keepalive(l)
		case <-t.C:
			p.mu.Lock()
			links := make([]*link, 0, len(p.links))
			for l := range p.links {
				links = append(links, l)
			}
			p.mu.Unlock()
			for _, l := range links {
				p.keepalive(l)
			}
		}
	}
}

// keepalive sends l a keepalive request, unless one is awaiting its reply already, and closes
// the link when it fails or goes unanswered for KeepaliveTimeout. Closing the link wakes every
// pending RPC on it. It does not wait for the reply.
func (p *Pool) keepalive(l *link) {
	if !l.alive() || !l.keepaliveRunning.CompareAndSwap(false, true) {
		return
	}
	p.bg.Go(func() {
		defer l.keepaliveRunning.Store(false)
		unanswered := time.AfterFunc(p.opts.KeepaliveTimeout, func() {
			p.logger.Warn("ssh keepalive unanswered: closing the link as dead", "hostpool", p.opts.Name, "addr", l.addr,
				"timeout", p.opts.KeepaliveTimeout)
			l.conn.Close()
		})
		// Blocks without a bound; the timer above closing the link ends it.
		_, _, err := l.conn.SendRequest(keepaliveRequest, true, nil)
		if unanswered.Stop() && err != nil {
			p.logger.Info("ssh keepalive failed: closing the link", "hostpool", p.opts.Name, "addr", l.addr, "err", redact.Err(err))
			l.conn.Close()
		}
	})
}

// checkSoon asks the keepalive loop to check l now (a probe on it was abandoned: a hung
// libvirtd or a link that died without a word, which a keepalive tells apart). A request
// that finds the loop busy is dropped: the loop is already checking links.
func (p *Pool) checkSoon(l *link) {
	select {
	case p.checkNow <- l:
	default:
	}
}
