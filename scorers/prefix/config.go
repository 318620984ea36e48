package prefix

import "fmt"

// Type is the prefix scorer's type string in a profile's scorers list.
const Type = "prefix"

// Config configures the prefix scorer (YAML params of a scorer with
// type "prefix").
type Config struct {
	// BlockSize is the block length in tokens (block_size, default 64).
	// The prompt is cut into blocks of BlockSize × BytesPerToken bytes.
	BlockSize int `mapstructure:"block_size"`
	// BytesPerToken approximates the tokenizer (bytes_per_token, default 4).
	BytesPerToken int `mapstructure:"bytes_per_token"`
	// MaxBlocks is how many leading blocks of a prompt are indexed and
	// matched (max_blocks, default 2048, i.e. 128k tokens: every prompt of the
	// shipped Mooncake trace, whose longest is 126k; docs/tuning.md).
	MaxBlocks int `mapstructure:"max_blocks"`
	// Capacity is how many blocks the index remembers per endpoint when the
	// server does not report its KV-cache size (capacity, default 32768).
	Capacity int `mapstructure:"capacity"`
	// Shards is the number of independently locked index shards; a power
	// of two (shards, default 16).
	Shards int `mapstructure:"shards"`
	// Learn is when a request's blocks are recorded on its endpoint:
	// "first_byte" (default) once the endpoint's first response byte
	// arrives, i.e. once it has computed the prompt; "pick" at the pick;
	// "join_new" at the first byte, and also at the pick when no
	// candidate held even the prompt's first block — a prefix nobody has
	// computed, so the prompts that share it and arrive while its first
	// prefill runs join the endpoint computing it instead of each
	// computing it somewhere else.
	Learn string `mapstructure:"learn"`
	// JoinKVUtil, with learn: join_new, is the mean scraped KV-cache
	// utilisation of the request's candidates with fresh metrics at or
	// above which a new prefix is recorded at the pick, in [0, 1]; 0
	// (the default): this gate is off (see JoinCacheFill). Below it, and
	// when no candidate has fresh metrics, the prefix is recorded at the
	// first byte as with first_byte: while the caches have room a new
	// prefix computed on several pods costs only the prefill, and spreads
	// its demand; once they are full each copy evicts another prefix.
	JoinKVUtil float64 `mapstructure:"join_kv_util"`
	// JoinCacheFill, with learn: join_new, is the mean share of the
	// candidates' prefix caches this index holds (blocks recorded on an
	// endpoint ÷ its capacity: from cache_config_info, else capacity, so
	// a server that does not report its KV size fills this only as far
	// as capacity says), at or above
	// which a new prefix is recorded at the pick, in [0, 1]; 0 (the
	// default): this gate is off. Unlike the scraped KV-cache use, it
	// counts the blocks a server keeps cached after their requests
	// finished, so it sees full caches on a fleet whose running requests
	// use little of its KV. When both this and JoinKVUtil are 0 the join
	// is always made; otherwise it is made when either gate is open.
	JoinCacheFill float64 `mapstructure:"join_cache_fill"`
	// JoinCacheRoom, with join_cache_fill, is how many prompts of the
	// request's length the candidates' prefix caches must hold (the mean
	// of what the index can hold for each, in blocks, ÷ the request's
	// blocks) for their fill to open the join; 0 (the default): any. A
	// cache that holds few prompts is always full whatever the traffic,
	// so its fill says nothing about new prefixes crowding out others,
	// and there a join herds a hot new prefix's onset on one pod (the L4
	// fleet's 30k-token caches hold 15 prompts of 2,048 tokens; an A100's
	// 70, docs/adaptive.md "Joining a new prefix when the caches are
	// full"). In [0, 1e6].
	JoinCacheRoom float64 `mapstructure:"join_cache_room"`
	// JoinSpreadFill, with learn: join_new, is the mean share of the
	// candidates' prefix caches this index holds (as JoinCacheFill
	// counts it) below which a request that would join a prefill in
	// progress may be spread: while a prompt recorded at the pick has not
	// answered, a candidate holding it is reported as joining
	// (scheduler.Match.Joining), and the scheduler's
	// scheduler.guard.join_factor ranks it after the others when waiting
	// for that prefill is slower than computing the prefix again. Above
	// it — or while the candidates' scraped KV use is at join_kv_util,
	// for servers that do not report their KV size, whose fill reads
	// low — a copy would evict another prefix, and the join stands: a
	// pool whose caches are full pays for every copy twice, in prefill
	// and in the prefixes it evicts (docs/adaptive.md, "Bounding a join
	// by its wait"). A prompt counts until its first byte, for at most
	// 60 s after its request arrived (a request that fails never
	// answers), 1,024 at a time. In [0, 1]; 0 (the default): never
	// reported; without scheduler.guard.join_factor nothing reads it.
	JoinSpreadFill float64 `mapstructure:"join_spread_fill"`
}

// DefaultConfig returns the defaults: 64-token blocks of 4 bytes a
// token, 2048 blocks per prompt, 32768 blocks per endpoint, 16 shards.
func DefaultConfig() Config {
	return Config{BlockSize: 64, BytesPerToken: 4, MaxBlocks: 2048, Capacity: 1 << 15, Shards: 16, Learn: LearnFirstByte}
}

// When the prefix scorer records a request's blocks (Config.Learn).
const (
	LearnFirstByte = "first_byte"
	LearnPick      = "pick"
	LearnJoinNew   = "join_new"
)

// Validate checks the config; errors name the field.
func (c Config) Validate() error {
	switch {
	case c.BlockSize <= 0:
		return fmt.Errorf("prefix.block_size: must be > 0, got %d", c.BlockSize)
	case c.BytesPerToken <= 0:
		return fmt.Errorf("prefix.bytes_per_token: must be > 0, got %d", c.BytesPerToken)
	case c.BlockSize*c.BytesPerToken > 1<<20:
		return fmt.Errorf("prefix.block_size: %d tokens × %d bytes per token exceeds 1 MiB", c.BlockSize, c.BytesPerToken)
	case c.MaxBlocks <= 0 || c.MaxBlocks > 1<<16:
		return fmt.Errorf("prefix.max_blocks: must be in 1…65536, got %d", c.MaxBlocks)
	case c.Capacity <= 0 || c.Capacity > 1<<30:
		return fmt.Errorf("prefix.capacity: must be in 1…2^30, got %d", c.Capacity)
	case c.Shards <= 0 || c.Shards > 1024 || c.Shards&(c.Shards-1) != 0:
		return fmt.Errorf("prefix.shards: must be a power of two in 1…1024, got %d", c.Shards)
	case c.Learn != LearnFirstByte && c.Learn != LearnPick && c.Learn != LearnJoinNew:
		return fmt.Errorf("prefix.learn: must be %q, %q or %q, got %q", LearnFirstByte, LearnPick, LearnJoinNew, c.Learn)
	case !(c.JoinKVUtil >= 0 && c.JoinKVUtil <= 1):
		return fmt.Errorf("prefix.join_kv_util: must be in [0, 1], got %v", c.JoinKVUtil)
	case c.JoinKVUtil > 0 && c.Learn != LearnJoinNew:
		return fmt.Errorf("prefix.join_kv_util: applies to learn: %s only (learn is %q)", LearnJoinNew, c.Learn)
	case !(c.JoinCacheFill >= 0 && c.JoinCacheFill <= 1):
		return fmt.Errorf("prefix.join_cache_fill: must be in [0, 1], got %v", c.JoinCacheFill)
	case c.JoinCacheFill > 0 && c.Learn != LearnJoinNew:
		return fmt.Errorf("prefix.join_cache_fill: applies to learn: %s only (learn is %q)", LearnJoinNew, c.Learn)
	case !(c.JoinCacheRoom >= 0 && c.JoinCacheRoom <= 1e6):
		return fmt.Errorf("prefix.join_cache_room: must be in [0, 1e6] prompts, got %v", c.JoinCacheRoom)
	case c.JoinCacheRoom > 0 && c.JoinCacheFill == 0:
		return fmt.Errorf("prefix.join_cache_room: applies with join_cache_fill only (join_cache_fill is 0)")
	case !(c.JoinSpreadFill >= 0 && c.JoinSpreadFill <= 1):
		return fmt.Errorf("prefix.join_spread_fill: must be in [0, 1], got %v", c.JoinSpreadFill)
	case c.JoinSpreadFill > 0 && c.Learn != LearnJoinNew:
		return fmt.Errorf("prefix.join_spread_fill: applies to learn: %s only (learn is %q)", LearnJoinNew, c.Learn)
	}
	return nil
}
