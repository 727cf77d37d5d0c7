package main

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/prometheus/common/version"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// landingTemplate is the status page. html/template escapes every value, so a check message
// quoting a remote error cannot inject markup.
var landingTemplate = template.Must(template.New("landing").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="30">
<title>Provider Health Exporter</title>
<style>
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #eee; }
.up { color: #1a7f37; font-weight: bold; }
.down { color: #cf222e; font-weight: bold; }
.unchecked { color: #666; }
.note { color: #555; }
</style>
</head>
<body>
<h1>Provider Health Exporter</h1>
<p>Checks infrastructure providers on a schedule and exports the verdicts as Prometheus metrics.
Version {{.Version}}.</p>
<ul>
<li><a href="metrics">Metrics</a></li>
<li><a href="-/healthy">Health</a></li>
<li><a href="-/ready">Readiness</a></li>
</ul>
<h2>Providers</h2>
{{if .ChecksOn -}}
<p>Checks run every {{.Interval}} with a timeout of {{.Timeout}}.
{{if .Round}}Round {{.Round}} started {{.RoundStarted}} ({{.RoundAgo}} ago) and took {{.RoundDuration}}.
{{- else}}No round of checks has finished yet.{{end}}
{{if .Abandoned}}Checkers abandoned at a deadline so far: {{.Abandoned}}.{{end}}</p>
{{- else -}}
<p class="note">Checks are off (--provider-check-interval=0): providers are listed, never checked.</p>
{{- end}}
{{if .Rows -}}
<table>
<thead><tr><th>Provider</th><th>Type</th><th>Target</th><th>Verdict</th><th>Reason</th><th>Message</th><th>Since</th><th>Last checked</th></tr></thead>
<tbody>
{{range .Rows -}}
{{if .Checked -}}
<tr><td>{{.Provider}}</td><td>{{.Type}}</td><td>{{.Target}}</td>
<td class="{{if .Up}}up{{else}}down{{end}}">{{if .Up}}up{{else}}down{{end}}</td>
<td>{{.Reason}}</td><td>{{.Message}}</td>
<td>{{.Since}}<br><span class="note">for {{.SinceFor}}</span></td>
<td>{{.CheckedAt}}<br><span class="note">{{.CheckedAgo}} ago, took {{.Duration}}</span></td></tr>
{{- else -}}
<tr><td>{{.Provider}}</td><td>{{.Type}}</td><td colspan="6" class="unchecked">not checked yet</td></tr>
{{- end}}
{{end -}}
</tbody>
</table>
{{- else -}}
<p class="note">The providers file lists no providers.</p>
{{- end}}
<p class="note">Page generated {{.Now}}; it refreshes every 30 seconds.</p>
</body>
</html>
`))

type landingData struct {
	Version       string
	ChecksOn      bool
	Interval      time.Duration
	Timeout       time.Duration
	Round         uint64
	RoundStarted  string
	RoundAgo      string
	RoundDuration time.Duration
	Abandoned     uint64
	Rows          []landingRow
	Now           string
}

// landingRow is one target, or a provider that has not been checked yet.
type landingRow struct {
	Provider   string
	Type       checks.ProviderType
	Target     string
	Checked    bool
	Up         bool
	Reason     checks.Reason
	Message    string
	Since      string
	SinceFor   string
	CheckedAt  string
	CheckedAgo string
	Duration   time.Duration
}

// serveLanding renders the status page from the current snapshot.
func (e *exporter) serveLanding(w http.ResponseWriter, _ *http.Request) {
	data := e.landingData(e.runner.Current(), time.Now())
	// Render into a buffer so that a template error is a clean 500, not half a page.
	var buf bytes.Buffer
	if err := landingTemplate.Execute(&buf, data); err != nil {
		e.logger.Error("rendering the landing page", "err", err)
		http.Error(w, "rendering the landing page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

func (e *exporter) landingData(s *checks.Snapshot, now time.Time) landingData {
	d := landingData{
		Version:       version.Version,
		ChecksOn:      e.checksOn(),
		Interval:      e.interval,
		Timeout:       e.timeout,
		Round:         s.Round,
		RoundDuration: roundDuration(s.RoundDuration),
		Abandoned:     s.AbandonedTotal,
		Now:           formatTime(now),
	}
	if d.Version == "" {
		d.Version = "(development build)"
	}
	if s.Round > 0 {
		d.RoundStarted = formatTime(s.RoundStarted)
		d.RoundAgo = humanDuration(now.Sub(s.RoundStarted))
	}
	for _, p := range s.Providers {
		if len(p.Targets) == 0 {
			d.Rows = append(d.Rows, landingRow{Provider: p.Name, Type: p.Type})
			continue
		}
		for _, t := range p.Targets {
			d.Rows = append(d.Rows, landingRow{
				Provider:   p.Name,
				Type:       p.Type,
				Target:     t.Target,
				Checked:    true,
				Up:         t.Up,
				Reason:     t.Reason,
				Message:    t.Message,
				Since:      formatTime(t.Since),
				SinceFor:   humanDuration(now.Sub(t.Since)),
				CheckedAt:  formatTime(t.CheckedAt),
				CheckedAgo: humanDuration(now.Sub(t.CheckedAt)),
				Duration:   roundDuration(t.Duration),
			})
		}
	}
	return d
}

// roundDuration keeps three significant places or so: 1.234s, not 1.234567891s; 42µs, not 0s.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// formatTime writes an absolute time the same way everywhere on the page, in UTC.
func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// humanDuration writes an elapsed time the way a person reads it at a glance: "42s", "3m",
// "5h12m", "3d4h". Precision below the largest unit or two is noise on a status page.
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days, h := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour)
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
}
