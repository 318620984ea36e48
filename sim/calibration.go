package sim

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/sim/engine"
)

//go:embed engines/*.yaml
var shippedEngines embed.FS

// EngineClass is one class of a mixed pool: a share of the servers that
// run the pool's engine with the class's own overrides (another GPU
// generation: its own KV cache and step costs), and declare Capacity to
// the router.
type EngineClass struct {
	// Name labels the class (e.g. "h100-80gb").
	Name string `yaml:"name"`
	// Share is the fraction of the servers in the class, in (0, 1]; the
	// shares sum to 1.
	Share float64 `yaml:"share"`
	// Capacity is what each server of the class declares to the router,
	// relative to the others, in (0, 64] (default 1).
	Capacity float64 `yaml:"capacity"`
	// EngineOverrides apply on top of the pool's engine; they cannot
	// nest classes or change block_size.
	EngineOverrides `yaml:",inline"`
}

// ClassOf returns the engine class of server i (−1 without classes).
// Servers are dealt to classes by smooth weighted round robin over the
// shares, so every prefix of the servers holds each class in close to its
// share (with shares ½ and ½: A B A B …) and a pod lost or joined is not
// always of one class.
func (o *EngineOverrides) ClassOf(i int) int {
	if len(o.Classes) == 0 {
		return -1
	}
	credit := make([]float64, len(o.Classes))
	pick := 0
	for range i + 1 {
		pick = 0
		for k, c := range o.Classes {
			credit[k] += c.Share
			if credit[k] > credit[pick] {
				pick = k
			}
		}
		credit[pick]--
	}
	return pick
}

// Validate checks the overrides applied to the engine defaults and every
// class; errors name the key as the YAML spells it under engine:.
func (o *EngineOverrides) Validate() error {
	base := o.Apply(engine.DefaultConfig())
	errs := []error{base.Validate()}
	if len(o.Classes) == 0 {
		return errors.Join(errs...)
	}
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(o.Classes) > 16 {
		bad("engine.classes: %d classes, want at most 16", len(o.Classes))
	}
	sum := 0.0
	for k := range o.Classes {
		c := &o.Classes[k]
		f := fmt.Sprintf("engine.classes[%d]", k)
		if c.Name == "" {
			bad("%s.name: must be set", f)
		}
		if !(c.Share > 0) || c.Share > 1 {
			bad("%s.share: %v, want in (0, 1]", f, c.Share)
		}
		sum += c.Share
		if !(c.Capacity > 0) || c.Capacity > 64 {
			bad("%s.capacity: %v, want in (0, 64]", f, c.Capacity)
		}
		if len(c.Classes) > 0 {
			bad("%s.classes: classes cannot nest", f)
		}
		if c.BlockSize != 0 && c.BlockSize != base.BlockSize {
			bad("%s.block_size: %d, but the pool's is %d (the router hashes one block size)", f, c.BlockSize, base.BlockSize)
		}
		if err := c.Apply(base).Validate(); err != nil {
			bad("%s: %w", f, err)
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		bad("engine.classes: shares sum to %v, want 1", sum)
	}
	return errors.Join(errs...)
}

// setDefaults fills each class's capacity left zero with 1.
func (o *EngineOverrides) setDefaults() {
	for k := range o.Classes {
		if o.Classes[k].Capacity == 0 {
			o.Classes[k].Capacity = 1
		}
	}
}

// EngineNames returns the names of the shipped engine calibrations
// (sim/engines), sorted.
func EngineNames() []string { return embeddedNames(shippedEngines, "engines") }

// maxEngineFile bounds an engine calibration file.
const maxEngineFile = 1 << 20

// LoadEngine reads an engine calibration: a YAML file with the keys of a
// scenario's engine: section, or, for a name without a path separator
// and without a file of that name, a shipped calibration. Unknown keys
// and invalid values are errors naming the key. It returns the
// calibration and its name (the shipped name, or the file's path).
func LoadEngine(nameOrPath string) (EngineOverrides, string, error) {
	data, err := readBounded(nameOrPath)
	name := nameOrPath
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) || strings.ContainsRune(nameOrPath, os.PathSeparator) {
			return EngineOverrides{}, "", fmt.Errorf("engine: %w", err)
		}
		name = strings.TrimSuffix(nameOrPath, ".yaml")
		data, err = shippedEngines.ReadFile("engines/" + name + ".yaml")
		if err != nil {
			return EngineOverrides{}, "", fmt.Errorf("engine: no file %q and no shipped calibration of that name (shipped: %s)", nameOrPath, strings.Join(EngineNames(), ", "))
		}
	}
	e, err := ParseEngine(data)
	if err != nil {
		return EngineOverrides{}, "", fmt.Errorf("engine %s: %w", name, err)
	}
	return e, name, nil
}

// ParseEngine decodes and validates an engine calibration (the keys of a
// scenario's engine: section; unknown keys are errors).
func ParseEngine(data []byte) (EngineOverrides, error) {
	var e EngineOverrides
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&e); err != nil && !errors.Is(err, io.EOF) {
		return EngineOverrides{}, err
	}
	e.setDefaults()
	if err := e.Validate(); err != nil {
		return EngineOverrides{}, err
	}
	return e, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	if st.Size() > maxEngineFile {
		return nil, fmt.Errorf("%s: %d bytes, want at most %d", path, st.Size(), maxEngineFile)
	}
	return os.ReadFile(path)
}

// ApplyEngine loads the engine calibration nameOrPath (LoadEngine) and
// makes it every scenario's engine, replacing its engine: section; ""
// leaves the scenarios as they are. A scenario's adapter slots
// (max_loras, max_cpu_loras: the deployment's settings, not the GPU's)
// stay unless the calibration sets them.
func ApplyEngine(scs []*Scenario, nameOrPath string) error {
	if nameOrPath == "" {
		return nil
	}
	e, name, err := LoadEngine(nameOrPath)
	if err != nil {
		return err
	}
	for _, sc := range scs {
		own := sc.Engine
		sc.Engine, sc.EngineName = e, name
		if e.MaxLoRAs == 0 {
			sc.Engine.MaxLoRAs, sc.Engine.MaxCPULoRAs = own.MaxLoRAs, own.MaxCPULoRAs
		}
		if err := sc.Validate(); err != nil {
			return fmt.Errorf("engine %s: %w", name, err)
		}
	}
	return nil
}
