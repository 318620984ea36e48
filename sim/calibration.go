package sim

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/sim/scenario"
)

//go:embed engines/*.yaml
var shippedEngines embed.FS

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
func LoadEngine(nameOrPath string) (scenario.EngineOverrides, string, error) {
	data, err := readBounded(nameOrPath)
	name := nameOrPath
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) || strings.ContainsRune(nameOrPath, os.PathSeparator) {
			return scenario.EngineOverrides{}, "", fmt.Errorf("engine: %w", err)
		}
		name = strings.TrimSuffix(nameOrPath, ".yaml")
		data, err = shippedEngines.ReadFile("engines/" + name + ".yaml")
		if err != nil {
			return scenario.EngineOverrides{}, "", fmt.Errorf("engine: no file %q and no shipped calibration of that name (shipped: %s)", nameOrPath, strings.Join(EngineNames(), ", "))
		}
	}
	e, err := ParseEngine(data)
	if err != nil {
		return scenario.EngineOverrides{}, "", fmt.Errorf("engine %s: %w", name, err)
	}
	return e, name, nil
}

// ParseEngine decodes and validates an engine calibration (the keys of a
// scenario's engine: section; unknown keys are errors).
func ParseEngine(data []byte) (scenario.EngineOverrides, error) {
	var e scenario.EngineOverrides
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&e); err != nil && !errors.Is(err, io.EOF) {
		return scenario.EngineOverrides{}, err
	}
	e.SetDefaults()
	if err := e.Validate(); err != nil {
		return scenario.EngineOverrides{}, err
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
func ApplyEngine(scs []*scenario.Scenario, nameOrPath string) error {
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
