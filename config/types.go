package config

// Defaults the loader applies to every provider. A provider type's own defaults live in its
// package (checks/<type>).
const (
	// DefaultFailureThreshold and DefaultSuccessThreshold publish every check's verdict at once.
	DefaultFailureThreshold = 1
	DefaultSuccessThreshold = 1
)

// Config is the providers file (--config.file), validated and with every default applied.
type Config struct {
	// Providers in file order. May be empty: an exporter without providers runs no checks.
	Providers []Provider `yaml:"providers"`
}

// Provider is one entry of the providers file: a name, a type and the block for that type.
type Provider struct {
	// Name is a DNS-1123 label, unique in the file; also the ProviderHealth object's name.
	Name string `yaml:"name"`
	// Type is a registered provider type (RegisterType); the key of its block.
	Type string `yaml:"type"`
	// FailureThreshold is how many consecutive failed checks turn an up target down, and
	// SuccessThreshold how many consecutive successful ones turn a down target up (Kubernetes
	// probes' names and meaning). After loading both are at least 1 (default 1).
	FailureThreshold int `yaml:"failureThreshold,omitempty"`
	SuccessThreshold int `yaml:"successThreshold,omitempty"`
	// Labels are exported for every target of the provider in target_info (a target's own
	// labels win); names follow LabelNameProblem.
	Labels map[string]string `yaml:"labels,omitempty"`
	// Block is the provider's type block as its type decoded it: the type package's own
	// struct (for example *kvm.Config). Never nil after loading.
	Block Block `yaml:"-"`
}

// Block is a provider type's decoded block.
type Block interface {
	// Equal reports whether the block configures the same checker as other (a block of the same
	// type). A reload keeps the checker, with its connections and state, of an Equal block.
	Equal(other Block) bool
	// Files lists the local files the block names (credentials, CA bundles, kubeconfigs), for
	// --config.check and for noticing that one changed. A file that is not set has an empty
	// Path (Config.Files leaves it out).
	Files() []File
	// Warnings lists what the exporter says loudly at every load of the block: settings that
	// weaken security. provider is the provider's name, for the message.
	Warnings(provider string) []string
}

// File is one local file a block names.
type File struct {
	// Field is the block's key that names the file, e.g. privateKeyFile.
	Field string
	// Path is absolute: relative paths are taken from the providers file's directory.
	Path string
	// Secret says the file's content is a credential (a password, a private key, a
	// kubeconfig): no message of any provider may show it (checks.Sanitize).
	Secret bool
}

// BlockType is how the loader decodes one provider type's block.
type BlockType struct {
	// Fields are the keys the block allows, in the order the docs list them: normally
	// YAMLKeys of the block's struct.
	Fields []string
	// Decode reads the block's fields, reports every problem with Fields.Errorf, and returns
	// the block with its defaults applied; its result is dropped when it reported a problem.
	Decode func(f *Fields) Block
}

// Inventory is a Block whose targets come partly from target files (kvm's hostFiles, in
// Prometheus's file_sd format): the exporter reads the files at every load of the providers
// file and again whenever one changes, without a reload, and runs the checker of the block
// WithTargets returns. A file that stops reading well keeps its last good groups.
type Inventory interface {
	Block
	// TargetFilePatterns are the globs (absolute) naming the block's target files.
	TargetFilePatterns() []string
	// TargetProblem says what is wrong with one target of a file; "" when it is valid.
	TargetProblem(target string) string
	// WithTargets returns a copy of the block with the targets of files added to its own, in
	// the order given. warnings says what it left out (a target the block already has).
	WithTargets(files []TargetFile) (block Block, warnings []string)
}

// TargetFile is one target file's groups, as last read well.
type TargetFile struct {
	Path   string
	Groups []TargetGroup
}
