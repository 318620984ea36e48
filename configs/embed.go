package configs

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

//go:embed *.yaml
var shipped embed.FS

// Shipped returns the names of the profiles shipped with trimtab
// ("default", "prefix-heavy", …).
func Shipped() []string {
	entries, _ := fs.ReadDir(shipped, ".")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	slices.Sort(names)
	return names
}

// LoadShipped parses the shipped profile called name.
func LoadShipped(name string) (*File, error) {
	data, err := shipped.ReadFile(name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no shipped profile %q (have %s)", name, strings.Join(Shipped(), ", "))
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("shipped profile %s: %w", name, err)
	}
	f.Path = "configs/" + name + ".yaml"
	return f, nil
}
