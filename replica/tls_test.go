package replica

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// writeCA makes a CA and one certificate for 127.0.0.1 signed by it, and
// writes them as PEM files into dir; it returns the TLS section.
func writeCA(t *testing.T, dir string) TLSConfig {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "trimtab test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "replica"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return TLSConfig{CertFile: write("cert.pem", "CERTIFICATE", der), KeyFile: write("key.pem", "EC PRIVATE KEY", keyDER), CAFile: write("ca.pem", "CERTIFICATE", caDER)}
}

// TestMutualTLS: replicas with certificates from one CA sync; a replica
// without a certificate, or with one from another CA, is refused.
func TestMutualTLS(t *testing.T) {
	good, other := writeCA(t, t.TempDir()), writeCA(t, t.TempDir())
	la, lb, lc, ld := listen(t), listen(t), listen(t), listen(t)
	cfgA := testConfig("a", lb.Addr().String())
	cfgA.Insecure, cfgA.TLS = false, good
	cfgB := testConfig("b", la.Addr().String())
	cfgB.Insecure, cfgB.TLS = false, good
	cfgC := testConfig("c", la.Addr().String()) // no TLS at all
	cfgD := testConfig("d", la.Addr().String())
	cfgD.Insecure, cfgD.TLS = false, other // a certificate a's CA did not sign
	prefix := prefix.DefaultConfig()
	a := start(t, cfgA, la, prefix)
	b := start(t, cfgB, lb, prefix)
	c := start(t, cfgC, lc, prefix)
	d := start(t, cfgD, ld, prefix)

	dec, err := a.sched.Pick(t.Context(), &scheduler.Request{Prompt: prompt("AB"), Subset: []string{"10.0.0.3:8000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Done(scheduler.Outcome{})
	eventually(t, "b to count a's request over mutual TLS", func() bool { return b.sched.Pool().Pointers()[2].InFlight() == 1 })
	eventually(t, "c and d to be refused", func() bool {
		pc, pd := c.rep.Status().Peers[0], d.rep.Status().Peers[0]
		return !pc.Connected && pc.LastError != "" && !pd.Connected && pd.LastError != ""
	})
	for _, in := range a.rep.Status().Inbound {
		if in.ID != "b" {
			t.Errorf("a accepted a stream from %q", in.ID)
		}
	}
}
