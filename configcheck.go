package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/prometheus/exporter-toolkit/web"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// unreadableFiles lists the files the providers reference (kubeconfigs, keys, known_hosts) that
// cannot be read here (missing, not a regular file, too large, not readable). They are warnings, not problems: a missing file is a verdict at run time
// (ConfigError, CredentialsError, KeyMaterialError), and a file check run away from the
// deployment (in CI, on a laptop) does not see the files mounted into it.
func unreadableFiles(cfg *config.Config) []string {
	var ws []string
	for _, pf := range cfg.Files() {
		if _, err := fileread.Read(pf.Path, fileread.KnownHostsLimit); err != nil {
			ws = append(ws, fmt.Sprintf("provider %s: %s: %v (its checks will fail until the file is readable)", pf.Provider, pf.Field, err))
		}
	}
	return ws
}

// configCheck implements --config.check: it validates the flags, the web config file (when
// given) and the providers file, builds (and closes again) every checker as a start would, and
// prints every problem, or "ok".
func configCheck(opts *options, stdout, stderr io.Writer) int {
	var problems []string
	timeout, err := checkTiming(opts.interval, opts.timeout)
	if err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	if err := checkCRD(opts.crd); err != nil {
		problems = append(problems, err.Error())
	}
	if err := checkProbeMinInterval(opts.probeMinInterval); err != nil {
		problems = append(problems, err.Error())
	}
	if err := checkShard(opts.shard); err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	if err := checkWebTimeouts(opts); err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	limitsErr := checkLimits(opts.limits)
	if limitsErr != nil {
		problems = append(problems, strings.Split(limitsErr.Error(), "\n")...)
		opts.limits = config.DefaultLimits
	}
	if path := *opts.web.WebConfigFile; path != "" {
		if err := web.Validate(path); err != nil {
			problems = append(problems, fmt.Sprintf("--web.config.file=%s: %v", path, err))
		}
	}
	cfg, err := config.LoadWith(opts.configFile, timeout, opts.limits.MaxSize)
	if err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	} else {
		hostProblems, hostWarnings, expanded := exporter.CheckHostFiles(cfg, opts.limits)
		problems = append(problems, hostProblems...)
		if err := exporter.ValidateCheckers(expanded); err != nil {
			problems = append(problems, strings.Split(err.Error(), "\n")...)
		}
		for _, w := range cfg.Warnings() {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
		for _, w := range slices.Concat(unreadableFiles(cfg), hostWarnings) {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		return 1
	}
	fmt.Fprintln(stdout, "ok")
	return 0
}
