package exporter

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// newChecker builds the Checker of one provider with its registered type's constructor
// (checks.Register; package providers lists the types of the build). Constructors must not contact
// the provider: connections are opened by the checks themselves, so that building is cheap and
// --config.check can build every checker without side effects.
func newChecker(p config.Provider, logger *slog.Logger) (checks.Checker, error) {
	t, ok := checks.Lookup(checks.ProviderType(p.Type))
	if !ok {
		return nil, errNotInBuild(p.Type)
	}
	return t.New(p, logger)
}

func errNotInBuild(typ string) error {
	return fmt.Errorf("checks of type %s are not available in this build", typ)
}

// entry is one running provider: the configuration its checker was built from, and the checker.
type entry struct {
	provider config.Provider
	checker  checks.Checker
}

// labels are the entry's provider's labels and its targets' (the providers file's labels maps).
func (en entry) labels() checks.Labels {
	l := checks.Labels{Provider: en.provider.Labels}
	if tl, ok := en.provider.Block.(config.TargetLabeler); ok {
		l.Targets = tl.TargetLabels()
	}
	return l
}

// checkerSet is the outcome of building the checkers of a providers file.
type checkerSet struct {
	// entries by provider name: what the exporter keeps to compare the next reload against.
	entries map[string]entry
	// checkers in the providers file's order: what the runner is given.
	checkers []checks.Checker
	// retired are the previous checkers the new set does not use (their provider was removed
	// or changed). Close them once the runner has switched to the new set.
	retired []io.Closer
	// built are the checkers built for the set (not kept from the previous one): closed
	// again when the set is not installed.
	built []io.Closer
	// What the reload changed, for its log line.
	added, changed, kept, removed int
	// cfg is the providers file the set was loaded from, before its host files were read.
	cfg *config.Config
}

// providers returns the set's checkers in the providers file's order, each with its provider's
// thresholds: what the runner is given.
func (s *checkerSet) providers() []checks.Provider {
	ps := make([]checks.Provider, len(s.checkers))
	for i, c := range s.checkers {
		en := s.entries[c.Name()]
		p := en.provider
		ps[i] = checks.Provider{Checker: c, Thresholds: checks.Thresholds{Failure: p.FailureThreshold, Success: p.SuccessThreshold}, Labels: en.labels()}
	}
	return ps
}

// allClosers returns the closers of every checker of the set, for shutting down.
func (s *checkerSet) allClosers() []io.Closer {
	var cs []io.Closer
	for _, c := range s.checkers {
		if cl, ok := c.(io.Closer); ok {
			cs = append(cs, cl)
		}
	}
	return cs
}

// buildCheckers builds the checkers of cfg. A provider whose configuration is Equal to its
// entry in old keeps its running checker, so that its connections and its state survive a
// reload; every other provider gets a new checker. On error nothing changes: the checkers built
// so far are closed again and every failing provider is reported.
func buildCheckers(cfg *config.Config, old map[string]entry, logger *slog.Logger) (*checkerSet, error) {
	set := &checkerSet{entries: make(map[string]entry, len(cfg.Providers))}
	var built []io.Closer
	var errs []error
	for _, p := range cfg.Providers {
		if prev, ok := old[p.Name]; ok && prev.provider.Equal(p) && !isStale(prev.checker) {
			// The new provider, whose labels may differ (they change no checker).
			set.entries[p.Name] = entry{provider: p, checker: prev.checker}
			set.checkers = append(set.checkers, prev.checker)
			set.kept++
			continue
		}
		if prev, ok := old[p.Name]; ok && !isStale(prev.checker) {
			// A provider whose connections can carry over (a kvm provider whose host list
			// alone changed) gets a checker sharing them: unchanged hosts keep their links.
			if r, ok := prev.checker.(checks.Retargeter); ok {
				if c, ok := r.Retarget(p, logger.With("provider", p.Name)); ok {
					if cl, ok := c.(io.Closer); ok {
						built = append(built, cl)
					}
					set.entries[p.Name] = entry{provider: p, checker: c}
					set.checkers = append(set.checkers, c)
					set.changed++
					continue
				}
			}
		}
		c, err := newChecker(p, logger.With("provider", p.Name))
		if err != nil {
			errs = append(errs, fmt.Errorf("provider %s: %w", p.Name, err))
			continue
		}
		if cl, ok := c.(io.Closer); ok {
			built = append(built, cl)
		}
		set.entries[p.Name] = entry{provider: p, checker: c}
		set.checkers = append(set.checkers, c)
		if _, ok := old[p.Name]; ok {
			set.changed++
		} else {
			set.added++
		}
	}
	if len(errs) > 0 {
		closeAll(built, logger)
		if len(errs) > config.MaxProblems {
			errs = append(errs[:config.MaxProblems:config.MaxProblems], fmt.Errorf("and %d more providers whose checker cannot be built", len(errs)-config.MaxProblems))
		}
		return nil, errors.Join(errs...)
	}
	set.built = built
	for name, prev := range old {
		cur, ok := set.entries[name]
		if ok && cur.checker == prev.checker {
			continue
		}
		if !ok {
			set.removed++
		}
		if cl, ok := prev.checker.(io.Closer); ok {
			set.retired = append(set.retired, cl)
		}
	}
	return set, nil
}

// ValidateCheckers builds every checker of cfg as a start would (a constructor contacts nothing)
// and closes them again: --config.check. The error names every provider whose checker cannot
// be built.
func ValidateCheckers(cfg *config.Config) error {
	// Checkers log nothing while they are only built; discard it.
	set, err := buildCheckers(cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	closeAll(set.allClosers(), slog.New(slog.DiscardHandler))
	return nil
}

// closeAll closes every closer, logging (not returning) failures: a checker that cannot close
// cleanly must not keep the others open.
func closeAll(cs []io.Closer, logger *slog.Logger) {
	for _, c := range cs {
		if err := c.Close(); err != nil {
			name := ""
			if ch, ok := c.(checks.Checker); ok {
				name = ch.Name()
			}
			logger.Warn("closing a checker failed", "provider", name, "err", err)
		}
	}
}

// isStale reports whether a checker asks to be rebuilt although its providers-file block did not
// change: a file it read when it was built (a kubeconfig) has changed since, or could not be
// used. A reload then re-reads it.
func isStale(c checks.Checker) bool {
	s, ok := c.(checks.Staler)
	return ok && s.Stale()
}
