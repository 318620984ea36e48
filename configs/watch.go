package configs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// Watch reloads a profile while a service runs: on every value from
// Trigger (serve sends SIGHUP there) and when the file changes. The file's
// directory is watched, so editors that replace the file and Kubernetes
// ConfigMap symlink swaps (..data) are seen; file events are debounced by
// Debounce. Each reload is Load then Apply; every outcome is logged, and a
// refused reload leaves the running profile to the caller.
type Watch struct {
	// Path is the profile file.
	Path string
	// Apply installs a loaded profile or refuses it with an error saying
	// why.
	Apply func(*File) error
	// Trigger, when set, reloads at once on every value.
	Trigger <-chan os.Signal
	// Logger; nil discards.
	Logger *slog.Logger
	// Clock times the debounce; nil is the real clock.
	Clock clock.Clock
	// Ready, when set, is called once the file watch is in place (or has
	// failed, leaving Trigger), before any event is handled.
	Ready func()
}

// Debounce is how long Watch waits after a file event before reloading,
// so an editor's several writes make one reload.
const Debounce = 250 * time.Millisecond

// Run watches until ctx is done, then returns nil.
func (w Watch) Run(ctx context.Context) error {
	log, clk := w.Logger, w.Clock
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	var events <-chan fsnotify.Event
	if fw, err := fsnotify.NewWatcher(); err != nil {
		log.Warn("profile file watch unavailable; reload with SIGHUP", "err", err)
	} else {
		defer fw.Close()
		if err := fw.Add(filepath.Dir(w.Path)); err != nil {
			log.Warn("profile file watch unavailable; reload with SIGHUP", "err", err)
		} else {
			events = fw.Events
		}
	}
	if w.Ready != nil {
		w.Ready()
	}
	load := func(reason string) {
		f, err := Load(w.Path)
		if err == nil {
			err = w.Apply(f)
		}
		if err != nil {
			log.Error("profile reload refused; keeping the running profile", "trigger", reason, "err", err)
			return
		}
		log.Info("profile reloaded", "trigger", reason, "profile", w.Path, "adaptive", f.Adaptive.Enabled)
	}
	base := filepath.Base(w.Path)
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.Trigger:
			load("SIGHUP")
		case ev := <-events:
			if name := filepath.Base(ev.Name); name == base || name == "..data" {
				timer = clk.After(Debounce)
			}
		case <-timer:
			timer = nil
			load("file change")
		}
	}
}
