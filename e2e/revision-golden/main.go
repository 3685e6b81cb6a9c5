// Command revision-golden is the reference for the Rust port's ControllerRevision encoding
// (src/core/gojson.rs and src/core/revision.rs). It is built against the Kubernetes
// libraries that OpenKruise v1.9.0 pins (k8s.io/api and k8s.io/apimachinery v0.32.10, and
// the sigs.k8s.io/json those require), so its output is what Kruise v1.9.0 stores.
//
// Modes:
//
//	revision-golden schema             describes how encoding/json treats every struct field
//	                                   reachable from core/v1 PodTemplateSpec
//	revision-golden vectors CORPUS     prints, per corpus line, the revision data Kruise would
//	                                   store and the resulting ControllerRevision name
//	revision-golden vct-vectors CORPUS prints, per corpus line, the
//	                                   kruise.io/cloneset-volumeclaimtemplate-hash Kruise would
//	                                   write on a revision for those volumeClaimTemplates
//
// Why no dependency on the Kruise API module: Kruise's revision code encodes the whole
// CloneSet with the legacy codec (encoding/json over the typed struct), decodes that into a
// map[string]interface{}, keeps only spec.template, adds "$patch":"replace" and marshals
// {"spec":{"template":...}}. The CloneSet's spec.template field is a plain
// k8s.io/api/core/v1.PodTemplateSpec value and encoding/json encodes a nested struct value
// exactly as it encodes that value on its own, so the template subtree of the CloneSet's
// encoding equals json.Marshal of the PodTemplateSpec. Likewise the controller decodes the
// CloneSet from the apiserver with sigs.k8s.io/json (case-sensitive, as apimachinery's JSON
// serializer does), and decoding the template subtree on its own gives the same struct.
// Everything outside spec.template is discarded, so the CloneSet type itself never matters.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	kjson "sigs.k8s.io/json"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "schema":
		err = writeSchema(os.Stdout)
	case "vectors":
		if len(os.Args) != 3 {
			usage()
		}
		err = writeVectors(os.Args[2], os.Stdout)
	case "vct-vectors":
		if len(os.Args) != 3 {
			usage()
		}
		err = writeVCTVectors(os.Args[2], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "revision-golden:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: revision-golden schema | revision-golden vectors CORPUS.jsonl | revision-golden vct-vectors CORPUS.jsonl")
	os.Exit(2)
}

// ---------------------------------------------------------------------------------------
// schema

// Types whose JSON form is produced by their own MarshalJSON/UnmarshalJSON. Each becomes a
// leaf kind in the schema; the description is part of the schema so that the Rust side has
// the behaviour written next to the name it matches on.
var leafKinds = map[reflect.Type]string{
	reflect.TypeOf(resource.Quantity{}):    "quantity",
	reflect.TypeOf(intstr.IntOrString{}):   "intorstring",
	reflect.TypeOf(metav1.Time{}):          "time",
	reflect.TypeOf(metav1.MicroTime{}):     "microtime",
	reflect.TypeOf(metav1.Duration{}):      "duration",
	reflect.TypeOf(metav1.FieldsV1{}):      "fieldsv1",
	reflect.TypeOf(runtime.RawExtension{}): "rawextension",
}

var leafDescriptions = map[string]string{
	"quantity": "resource.Quantity, a struct (never omitted by omitempty). Decode: null gives the zero " +
		"quantity; otherwise the raw token, with surrounding quotes removed and whitespace trimmed, goes " +
		"through resource.ParseQuantity (a JSON number therefore parses as its literal text). Encode: a " +
		"string; the parsed input verbatim when ParseQuantity judged it canonical, else the canonical form " +
		"(CanonicalizeBytes); the zero quantity is \"0\".",
	"intorstring": "intstr.IntOrString, a struct (never omitted). Decode: a token starting with a quote is " +
		"a string; anything else is decoded as an int32 (null leaves 0). Encode: the string, or the int32.",
	"time": "metav1.Time, a struct (never omitted). Decode: null gives the zero time; otherwise a string " +
		"parsed with time.RFC3339. Encode: null for the zero time, else the UTC time formatted with " +
		"time.RFC3339 (whole seconds).",
	"microtime": "metav1.MicroTime, a struct (never omitted). Like time, but formatted with " +
		"RFC3339 and six fractional digits (2006-01-02T15:04:05.000000Z07:00).",
	"duration": "metav1.Duration, a struct (never omitted). Decode: a string for time.ParseDuration. " +
		"Encode: time.Duration.String().",
	"fieldsv1": "metav1.FieldsV1, a struct (never omitted). Decode: any JSON value except null is kept " +
		"as raw bytes. Encode: the raw bytes (null when unset).",
	"rawextension": "runtime.RawExtension, a struct (never omitted). Decode: any JSON value except null " +
		"is kept as raw bytes. Encode: the raw bytes (null when unset).",
	"any": "interface{}: decoded generically, encoded generically.",
	"bytes": "[]byte: base64 (StdEncoding) string; null or absent is nil. omitempty drops an empty " +
		"slice.",
}

var (
	jsonMarshaler   = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	jsonUnmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	textMarshaler   = reflect.TypeOf((*interface{ MarshalText() ([]byte, error) })(nil)).Elem()
	textUnmarshaler = reflect.TypeOf((*interface{ UnmarshalText([]byte) error })(nil)).Elem()
)

type schemaField struct {
	Name      string `json:"name"`
	Go        string `json:"go"`
	OmitEmpty bool   `json:"omitempty"`
	Type      string `json:"type"`
}

type schemaWalker struct {
	types  map[string][]schemaField
	leaves map[string]bool
}

func typeName(t reflect.Type) string {
	return t.PkgPath() + "." + t.Name()
}

// describe returns the type expression of t: "*X" pointer, "[]X" slice, "map[]X" map with
// string keys, or a base: string, bool, intN, uintN, floatN, bytes, any, a leaf kind, or
// "struct:<pkgpath>.<Name>".
func (w *schemaWalker) describe(t reflect.Type) string {
	if leaf, ok := leafKinds[t]; ok {
		w.leaves[leaf] = true
		return leaf
	}
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		if t.Kind() != reflect.Pointer {
			panic(fmt.Sprintf("type %v has its own JSON or text encoding and no leaf kind", t))
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return "*" + w.describe(t.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			w.leaves["bytes"] = true
			return "bytes"
		}
		return "[]" + w.describe(t.Elem())
	case reflect.Array:
		panic(fmt.Sprintf("array type %v is not supported", t))
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic(fmt.Sprintf("map type %v has non-string keys", t))
		}
		return "map[]" + w.describe(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("int%d", t.Bits())
	case reflect.Int:
		return "int64"
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("uint%d", t.Bits())
	case reflect.Uint, reflect.Uintptr:
		return "uint64"
	case reflect.Float32, reflect.Float64:
		return fmt.Sprintf("float%d", t.Bits())
	case reflect.Interface:
		if t.NumMethod() != 0 {
			panic(fmt.Sprintf("non-empty interface %v", t))
		}
		w.leaves["any"] = true
		return "any"
	case reflect.Struct:
		name := typeName(t)
		if _, seen := w.types[name]; !seen {
			w.types[name] = nil // placeholder against recursion
			w.types[name] = w.structFields(t)
		}
		return "struct:" + name
	default:
		panic(fmt.Sprintf("unsupported kind %v (%v)", t.Kind(), t))
	}
}

// structFields lists the JSON-visible fields of t the way encoding/json sees them, with
// embedded structs that have no JSON name flattened into their parent.
func (w *schemaWalker) structFields(t reflect.Type) []schemaField {
	var out []schemaField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				panic(fmt.Sprintf("embedded pointer %v in %v is not supported", ft, t))
			}
			if ft.Kind() != reflect.Struct {
				panic(fmt.Sprintf("embedded non-struct %v in %v is not supported", ft, t))
			}
			if _, leaf := leafKinds[ft]; leaf {
				panic(fmt.Sprintf("embedded leaf %v in %v is not supported", ft, t))
			}
			out = append(out, w.structFields(ft)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omitEmpty := false
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "", "inline":
			case "omitempty":
				omitEmpty = true
			default:
				panic(fmt.Sprintf("field %v.%s has JSON option %q, which the schema does not describe", t, f.Name, o))
			}
		}
		out = append(out, schemaField{Name: name, Go: f.Name, OmitEmpty: omitEmpty, Type: w.describe(f.Type)})
	}
	seen := map[string]bool{}
	for _, f := range out {
		if seen[f.Name] {
			panic(fmt.Sprintf("%v has two fields named %q; encoding/json's dominance rules are not modelled", t, f.Name))
		}
		seen[f.Name] = true
	}
	return out
}

func writeSchema(out io.Writer) error {
	w := &schemaWalker{types: map[string][]schemaField{}, leaves: map[string]bool{}}
	root := w.describe(reflect.TypeOf(corev1.PodTemplateSpec{}))
	// The volumeClaimTemplates hash encodes whole PersistentVolumeClaims (status included).
	w.describe(reflect.TypeOf(corev1.PersistentVolumeClaim{}))

	var buf bytes.Buffer
	buf.WriteString("{\n")
	buf.WriteString(`"about":"encoding/json behaviour of k8s.io/api v0.32.10 core/v1 PodTemplateSpec and PersistentVolumeClaim, generated by e2e/revision-golden (go run . schema); do not edit",` + "\n")
	buf.WriteString(`"types_syntax":"*X pointer, []X slice, map[]X map with string keys, struct:NAME, or a base kind: string bool int8..int64 uint8..uint64 float32 float64 or a leaf",` + "\n")
	buf.WriteString(`"root":` + mustJSON(root) + ",\n")
	buf.WriteString(`"leaves":{` + "\n")
	leafNames := make([]string, 0, len(w.leaves))
	for l := range w.leaves {
		leafNames = append(leafNames, l)
	}
	sort.Strings(leafNames)
	for i, l := range leafNames {
		buf.WriteString(mustJSON(l) + ":" + mustJSON(leafDescriptions[l]))
		if i+1 < len(leafNames) {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("},\n")
	buf.WriteString(`"types":{` + "\n")
	names := make([]string, 0, len(w.types))
	for n := range w.types {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		fields := w.types[n]
		if fields == nil {
			fields = []schemaField{}
		}
		buf.WriteString(mustJSON(n) + ":" + mustJSON(fields))
		if i+1 < len(names) {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("}\n}\n")
	_, err := out.Write(buf.Bytes())
	return err
}

func mustJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// ---------------------------------------------------------------------------------------
// vectors

type corpusEntry struct {
	Name           string          `json:"name"`
	CollisionCount int32           `json:"collisionCount"`
	Note           string          `json:"note"`
	Template       json.RawMessage `json:"template"`
}

type vector struct {
	Name           string `json:"name"`
	CollisionCount int32  `json:"collisionCount"`
	Data           string `json:"data"`
	Hash           string `json:"hash"`
	Revision       string `json:"revision"`
}

// apiserverRoundTrip returns the template as a client reads it back from the apiserver. A
// CloneSet is a custom resource: the apiserver decodes it into unstructured data (integers
// as int64, other numbers as float64) and encodes that with encoding/json, so the spelling of
// numbers is normalised (1e3 becomes 1000, 1.50 becomes 1.5) before any controller sees it.
func apiserverRoundTrip(template []byte) ([]byte, error) {
	var generic interface{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(template, &generic); err != nil {
		return nil, err
	}
	return json.Marshal(generic)
}

// revisionData reproduces Kruise v1.9.0's getPatch restricted to the template (see the
// package comment for why that restriction changes nothing).
func revisionData(template []byte) ([]byte, error) {
	stored, err := apiserverRoundTrip(template)
	if err != nil {
		return nil, err
	}
	// The controller's typed decode (apimachinery's JSON serializer, non-strict).
	var typed corev1.PodTemplateSpec
	if err := kjson.UnmarshalCaseSensitivePreserveInts(stored, &typed); err != nil {
		return nil, fmt.Errorf("typed decode: %w", err)
	}
	// The legacy codec's typed encode, then Kruise's generic decode and re-encode.
	encoded, err := json.Marshal(&typed)
	if err != nil {
		return nil, err
	}
	var raw map[string]interface{}
	if err := json.Unmarshal(encoded, &raw); err != nil {
		return nil, err
	}
	raw["$patch"] = "replace"
	return json.Marshal(map[string]interface{}{"spec": map[string]interface{}{"template": raw}})
}

// hashRevision is k8s.io/kubernetes/pkg/controller/history.HashControllerRevision for a
// revision holding only raw data and a non-nil collision count.
func hashRevision(data []byte, collisionCount int32) string {
	hf := fnv.New32()
	hf.Write(data)
	hf.Write([]byte(strconv.FormatInt(int64(collisionCount), 10)))
	return utilrand.SafeEncodeString(fmt.Sprint(hf.Sum32()))
}

// revisionName is history.ControllerRevisionName.
func revisionName(prefix, hash string) string {
	if len(prefix) > 223 {
		prefix = prefix[:223]
	}
	return prefix + "-" + hash
}

func writeVectors(corpusPath string, out io.Writer) error {
	return mapCorpus(corpusPath, out, func(text []byte) (interface{}, error) {
		var entry corpusEntry
		if err := json.Unmarshal(text, &entry); err != nil {
			return nil, err
		}
		data, err := revisionData(entry.Template)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", entry.Name, err)
		}
		hash := hashRevision(data, entry.CollisionCount)
		return vector{
			Name:           entry.Name,
			CollisionCount: entry.CollisionCount,
			Data:           string(data),
			Hash:           hash,
			Revision:       revisionName(entry.Name, hash),
		}, nil
	})
}

// mapCorpus writes, for each non-blank line of a JSON-lines corpus, the JSON of what convert
// makes of it, one per line.
func mapCorpus(corpusPath string, out io.Writer, convert func([]byte) (interface{}, error)) error {
	f, err := os.Open(corpusPath)
	if err != nil {
		return err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 1<<20), 16<<20)
	w := bufio.NewWriter(out)
	line := 0
	for scanner.Scan() {
		line++
		text := bytes.TrimSpace(scanner.Bytes())
		if len(text) == 0 {
			continue
		}
		v, err := convert(text)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", corpusPath, line, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	return w.Flush()
}

// ---------------------------------------------------------------------------------------
// vct-vectors

type vctCorpusEntry struct {
	Name                 string          `json:"name"`
	Note                 string          `json:"note"`
	VolumeClaimTemplates json.RawMessage `json:"volumeClaimTemplates"`
}

type vctVector struct {
	Name string `json:"name"`
	// Hash of the templates as stored without Kruise's webhook (TemplateNoDefaults).
	Hash string `json:"hash"`
	// Hash after the defaults Kruise's webhook stores: quantities rounded up to milli-units.
	DefaultedHash string `json:"defaultedHash"`
}

// vctHash is the value Kruise v1.9.0 writes in kruise.io/cloneset-volumeclaimtemplate-hash
// (pkg/controller/cloneset/utils/volumeclaimtemplate): "" without templates; otherwise only
// each template's name and spec, stable-sorted by name, encoded with encoding/json, and
// that byte slice hashed with FNV-1a (32 bits) through
// k8s.io/kubernetes/pkg/util/hash.DeepHashObject (v1.32.10), which prints it with
// dump.ForHash.
func vctHash(templates []corev1.PersistentVolumeClaim) (string, error) {
	if len(templates) == 0 {
		return "", nil
	}
	var pvcs []corev1.PersistentVolumeClaim
	for i := range templates {
		pvcs = append(pvcs, corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: templates[i].Name},
			Spec:       templates[i].Spec,
		})
	}
	sort.SliceStable(pvcs, func(i, j int) bool { return pvcs[i].Name < pvcs[j].Name })
	data, err := json.Marshal(pvcs)
	if err != nil {
		return "", err
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(data))
	return strconv.FormatUint(uint64(h.Sum32()), 10), nil
}

// webhookDefaults applies what Kruise's CloneSet webhook stores for volumeClaimTemplates
// that the hash can see: SetDefaults_ResourceList on limits and requests, which rounds each
// quantity up to milli-units.
func webhookDefaults(templates []corev1.PersistentVolumeClaim) {
	for i := range templates {
		for _, list := range []corev1.ResourceList{templates[i].Spec.Resources.Limits, templates[i].Spec.Resources.Requests} {
			for key, val := range list {
				val.RoundUp(-3)
				list[key] = val
			}
		}
	}
}

func writeVCTVectors(corpusPath string, out io.Writer) error {
	return mapCorpus(corpusPath, out, func(text []byte) (interface{}, error) {
		var entry vctCorpusEntry
		if err := json.Unmarshal(text, &entry); err != nil {
			return nil, err
		}
		stored, err := apiserverRoundTrip(entry.VolumeClaimTemplates)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", entry.Name, err)
		}
		var templates []corev1.PersistentVolumeClaim
		if err := kjson.UnmarshalCaseSensitivePreserveInts(stored, &templates); err != nil {
			return nil, fmt.Errorf("%s: typed decode: %w", entry.Name, err)
		}
		hash, err := vctHash(templates)
		if err != nil {
			return nil, err
		}
		webhookDefaults(templates)
		defaulted, err := vctHash(templates)
		if err != nil {
			return nil, err
		}
		return vctVector{Name: entry.Name, Hash: hash, DefaultedHash: defaulted}, nil
	})
}
