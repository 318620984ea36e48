package configs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/fleet"
)

// MaxFileBytes bounds every file the profile tooling reads whole: a
// profile, a static endpoints file, an EndpointPickerConfig to import.
// The largest real ones are a few KiB.
const MaxFileBytes = 4 << 20

// ReadFile reads path whole, refusing a file larger than limit bytes with
// an error naming the file and the limit, and stopping early when ctx is
// done. It never holds more than limit+1 bytes.
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	// Closing the file unblocks a read waiting on a pipe that never ends.
	stop := context.AfterFunc(ctx, func() { fh.Close() })
	defer stop()
	var buf bytes.Buffer
	if fi, err := fh.Stat(); err == nil && fi.Mode().IsRegular() {
		if fi.Size() > limit {
			return nil, tooLarge(path, limit)
		}
		buf.Grow(int(fi.Size()))
	}
	r := io.LimitReader(ctxReader{ctx, fh}, limit+1)
	if _, err := buf.ReadFrom(r); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(buf.Len()) > limit {
		return nil, tooLarge(path, limit)
	}
	return buf.Bytes(), nil
}

func tooLarge(path string, limit int64) error {
	return fmt.Errorf("%s: larger than the %d MiB limit for a configuration file", path, limit>>20)
}

// ctxReader stops reading once ctx is done (a pipe or device that never
// ends, or SIGTERM during a slow read).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// CheckFiles checks the files the profile names, as serve would read them
// at start: the static endpoints file (endpoints.mode static) must exist
// and hold valid endpoints. Errors name the setting, the file and the
// entry: `endpoints.file: eps.yaml: line 3: endpoints[0].address: …`.
// Validate does not read these files, so a reload is not refused while an
// endpoints file is being rewritten; config validate and serve call
// CheckFiles.
func (f *File) CheckFiles() error {
	if !f.HasEndpoints || f.Fleet.Endpoints.Mode != fleet.ModeStatic || f.Fleet.Endpoints.File == "" {
		return nil
	}
	if _, err := CheckEndpointsFile(f.Fleet.Endpoints.File); err != nil {
		return fmt.Errorf("endpoints.file: %w", err)
	}
	return nil
}

// CheckEndpointsFile reads and parses a static endpoints file (the format
// of fleet.Static) and returns how many endpoints it lists. Errors name
// the file and, for a bad entry, its line and field.
func CheckEndpointsFile(path string) (int, error) {
	data, err := ReadFile(context.Background(), path, MaxFileBytes)
	if err != nil {
		return 0, err
	}
	targets, err := fleet.ParseStatic(data, path)
	if err != nil {
		return 0, err
	}
	return len(targets), nil
}

// IsEndpointsFile reports whether data is a static endpoints file — a
// top-level endpoints: list — rather than a profile, whose endpoints: is
// a section (a map).
func IsEndpointsFile(data []byte) bool {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return false
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "endpoints" {
			return m.Content[i+1].Kind == yaml.SequenceNode
		}
	}
	return false
}

// errNotProfile is wrapped by Load's error for an endpoints file given
// where a profile was expected.
var errNotProfile = errors.New("this is a static endpoints file (a top-level endpoints: list), not a profile; a profile names it as endpoints: {mode: static, file: …}")
