package main

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"mqttd"
)

// reloader applies SIGHUP: it has the broker read its files again (the
// password and ACL files, the certificates), then reads the config file
// again, applies what can change in a running broker (log.level and the
// limits mqttd.Server.SetLimits takes) and logs what changed and what
// needs a restart.
type reloader struct {
	// mu makes a reload on SIGHUP and one asked through the API
	// (POST /api/v1/reload) take turns.
	mu    sync.Mutex
	srv   *mqttd.Server
	flags cliFlags
	// running is the configuration in force: it keeps the values of keys
	// that changed in the file but need a restart, so that each reload
	// names them again until the restart.
	running config
	log     zerolog.Logger
	// http are the metrics address's certificate and login files, read
	// again with the broker's; nil: none.
	http *httpFiles
}

// reload returns what failed: the files the broker read again, or the
// config file. on says what asked for it, for the log ("SIGHUP", "an API
// request").
func (r *reloader) reload(on string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	if err := r.srv.Reload(); err != nil {
		r.log.Error().Err(err).Msg("reload on " + on + " failed")
		errs = append(errs, err)
	} else {
		r.log.Info().Msg("reloaded the password and ACL files and the listeners' certificates on " + on)
	}
	if err := r.http.reload(); err != nil {
		r.log.Error().Err(err).Msg("reload of the metrics address's files on " + on + " failed")
		errs = append(errs, err)
	}
	if r.flags.config == "" {
		return errors.Join(errs...)
	}
	next, err := loadConfig(r.flags)
	if err != nil {
		r.log.Error().Err(err).Str("file", r.flags.config).Msg("config file not reloaded: it has problems; the running settings stay")
		return errors.Join(append(errs, fmt.Errorf("config file %s not reloaded: %w", r.flags.config, err))...)
	}
	applied, restart, err := r.srv.SetLimits(next.Limits)
	if err != nil {
		r.log.Error().Err(err).Msg("limits not reloaded")
		errs = append(errs, err)
	}
	added, changed, removed, err := r.srv.SetBridges(next.Bridges)
	if err != nil {
		r.log.Error().Err(err).Msg("bridges not reloaded")
		errs = append(errs, err)
	} else {
		r.running.Bridges = next.Bridges
		if len(added)+len(changed)+len(removed) > 0 {
			applied = append(applied, "bridges")
			r.log.Info().Strs("added", added).Strs("changed", changed).Strs("removed", removed).Msg("bridges reloaded")
		}
	}
	if next.Log.Level != r.running.Log.Level {
		level, _ := zerolog.ParseLevel(next.Log.Level) // loadConfig checked it
		zerolog.SetGlobalLevel(level)
		r.running.Log.Level = next.Log.Level
		applied = append(applied, "log.level")
	}
	restart = append(restart, changedKeys(r.running, next)...)
	r.log.Info().Str("file", r.flags.config).Strs("applied", applied).Strs("needs_restart", restart).
		Msg("config file reloaded on " + on)
	if len(restart) > 0 {
		r.log.Warn().Strs("needs_restart", restart).Msg("some changed settings take effect only after a restart")
	}
	return errors.Join(errs...)
}

// changedKeys lists the top-level keys other than limits and log.level
// whose values differ between a and b: the settings a reload does not
// apply.
func changedKeys(a, b config) []string {
	var keys []string
	va, vb := reflect.ValueOf(a.Options), reflect.ValueOf(b.Options)
	for i := range va.NumField() {
		name, _, _ := strings.Cut(va.Type().Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" || name == "limits" {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			keys = append(keys, name)
		}
	}
	if a.Log.Format != b.Log.Format {
		keys = append(keys, "log.format")
	}
	if a.Metrics != b.Metrics {
		keys = append(keys, "metrics")
	}
	return keys
}
