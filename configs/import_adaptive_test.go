package configs

import (
	"strings"
	"testing"
)

// TestImportHeaderSaysHowToEnableAdaptive: the imported profile runs the
// input's static weights, and its header says how to turn adaptive mode
// on; doing what it says (adding the section it names) gives a profile
// that validates with the loop on.
func TestImportHeaderSaysHowToEnableAdaptive(t *testing.T) {
	im := importFile(t, "default-plugins.yaml")
	var header string
	for _, line := range strings.Split(string(im.Profile), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		header += line + "\n"
	}
	for _, want := range []string{"adaptive:", "enabled: true", "docs/operating-adaptive-mode.md"} {
		if !strings.Contains(header, want) {
			t.Errorf("the header lacks %q:\n%s", want, header)
		}
	}
	f, err := Parse(append(im.Profile, "adaptive:\n  enabled: true\n"...))
	if err != nil {
		t.Fatalf("the profile with the header's adaptive section: %v\n%s", err, im.Profile)
	}
	if !f.Adaptive.Enabled {
		t.Error("adaptive mode is off after adding the section the header names")
	}
}
