//===- SynthCorpus.cpp - English-like text from a probabilistic grammar ---===//
//
// Paragraphs of 3 to 7 sentences. Sentence kinds: transitive clauses with
// subject-verb agreement and optional adverbs and places, past-tense clauses
// after a time phrase, "is/are" descriptions, counts ("There are 12 eggs"),
// quoted speech, yes/no questions with an agreeing answer, joined clauses,
// dated events and small sums. Word choices are Zipf-weighted. The random
// numbers come from a counter-based splitmix64 stream, never from <random>,
// whose distributions differ between standard libraries.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Data/TextCorpus.h"

#include <cmath>
#include <vector>

namespace moe::rt::data {

namespace {

struct Noun {
  const char *one;
  const char *many;
};
struct Verb {
  const char *third; // "sees"
  const char *base;  // "see"
  const char *past;  // "saw"
};

const Noun kAgents[] = {
    {"cat", "cats"},         {"dog", "dogs"},       {"bird", "birds"},
    {"fox", "foxes"},        {"child", "children"}, {"farmer", "farmers"},
    {"teacher", "teachers"}, {"king", "kings"},     {"robot", "robots"},
    {"girl", "girls"},       {"boy", "boys"},       {"horse", "horses"},
    {"owl", "owls"},         {"baker", "bakers"},   {"mouse", "mice"},
    {"queen", "queens"}};
const Noun kThings[] = {
    {"ball", "balls"},        {"apple", "apples"},   {"book", "books"},
    {"key", "keys"},          {"letter", "letters"}, {"box", "boxes"},
    {"lamp", "lamps"},        {"map", "maps"},       {"cake", "cakes"},
    {"egg", "eggs"},          {"stone", "stones"},   {"flower", "flowers"},
    {"hat", "hats"},          {"boat", "boats"},     {"coin", "coins"},
    {"umbrella", "umbrellas"}};
const Verb kVerbs[] = {
    {"sees", "see", "saw"},          {"likes", "like", "liked"},
    {"finds", "find", "found"},      {"carries", "carry", "carried"},
    {"wants", "want", "wanted"},     {"holds", "hold", "held"},
    {"watches", "watch", "watched"}, {"takes", "take", "took"},
    {"paints", "paint", "painted"},  {"makes", "make", "made"},
    {"drops", "drop", "dropped"},    {"buys", "buy", "bought"}};
const char *const kAdjectives[] = {
    "small", "big",  "red",    "old",    "happy", "little", "green", "quiet",
    "brave", "lazy", "clever", "orange", "heavy", "tired",  "angry", "empty"};
const char *const kAdverbs[] = {"often",     "never",  "always",
                                "sometimes", "slowly", "quietly"};
const char *const kPlaces[] = {"garden",  "forest",  "village", "market",
                               "kitchen", "school",  "park",    "castle",
                               "river",   "library", "field",   "house"};
const char *const kPrepositions[] = {"in", "near", "behind", "under", "beside"};
const char *const kNames[] = {"Anna", "Ben",   "Clara", "David",
                              "Emma", "Felix", "Grace", "Hugo",
                              "Iris", "Jack",  "Lena",  "Max"};
const char *const kTimes[] = {"Yesterday", "Last night", "This morning",
                              "Long ago", "Once"};
const char *const kCountWords[] = {"two", "three", "four",  "five",
                                   "six", "seven", "eight", "nine"};

/// A counter-based stream of random numbers.
class Rng {
public:
  explicit Rng(uint64_t seed) : seed_(seed) {}

  uint64_t next() {
    uint64_t z = seed_ + 0x9e3779b97f4a7c15ull * ++counter_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n) (the bias of a 64-bit modulus is negligible here).
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  /// True with probability `p`.
  bool chance(double p) { return (next() >> 11) * 0x1.0p-53 < p; }
  /// Index i in [0, n) with weight 1 / (i + 1): a Zipf-like choice.
  size_t zipf(size_t n) {
    double total = 0;
    for (size_t i = 0; i < n; ++i)
      total += 1.0 / static_cast<double>(i + 1);
    double u = (next() >> 11) * 0x1.0p-53 * total;
    for (size_t i = 0; i < n; ++i) {
      u -= 1.0 / static_cast<double>(i + 1);
      if (u < 0)
        return i;
    }
    return n - 1;
  }
  template <typename T, size_t N> const T &pick(const T (&items)[N]) {
    return items[zipf(N)];
  }

private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

bool startsWithVowel(const std::string &word) {
  return !word.empty() &&
         std::string("aeiou").find(word[0]) != std::string::npos;
}

/// A noun phrase and whether it is plural.
struct Phrase {
  std::string text;
  bool plural = false;
};

Phrase nounPhrase(Rng &rng, const Noun &noun, bool allowPlural) {
  Phrase phrase;
  phrase.plural = allowPlural && rng.chance(0.35);
  std::string head = phrase.plural ? noun.many : noun.one;
  if (rng.chance(0.4))
    head = std::string(rng.pick(kAdjectives)) + " " + head;
  if (phrase.plural) {
    static const char *const dets[] = {"the", "some", "many", "these"};
    phrase.text = rng.chance(0.3) ? std::string(rng.pick(kCountWords))
                                  : std::string(rng.pick(dets));
  } else {
    static const char *const dets[] = {"the", "a", "my", "this"};
    phrase.text = rng.pick(dets);
    if (phrase.text == "a" && startsWithVowel(head))
      phrase.text = "an";
  }
  phrase.text += " " + head;
  return phrase;
}

Phrase subject(Rng &rng) {
  if (rng.chance(0.2))
    return {rng.pick(kNames), false};
  return nounPhrase(rng, rng.pick(kAgents), true);
}

std::string place(Rng &rng) {
  std::string preposition = rng.pick(kPrepositions);
  return preposition + " the " + rng.pick(kPlaces);
}

// Every random choice below is its own statement: the operands of `+` are
// evaluated in an unspecified order, which would make the text depend on the
// compiler.

/// "the old cat often finds a key in the garden" (present tense).
std::string clause(Rng &rng) {
  Phrase who = subject(rng);
  const Verb &verb = rng.pick(kVerbs);
  std::string text = who.text;
  if (rng.chance(0.25))
    text += std::string(" ") + rng.pick(kAdverbs);
  text += std::string(" ") + (who.plural ? verb.base : verb.third);
  Phrase what = nounPhrase(rng, rng.pick(kThings), true);
  text += " " + what.text;
  if (rng.chance(0.3))
    text += " " + place(rng);
  return text;
}

/// "the children found some eggs".
std::string pastClause(Rng &rng) {
  Phrase who = subject(rng);
  const Verb &verb = rng.pick(kVerbs);
  Phrase what = nounPhrase(rng, rng.pick(kThings), true);
  return who.text + " " + verb.past + " " + what.text;
}

/// "Does the cat see a ball? No, it does not."
std::string question(Rng &rng) {
  Phrase who = subject(rng);
  const Verb &verb = rng.pick(kVerbs);
  Phrase what = nounPhrase(rng, rng.pick(kThings), true);
  bool isName = who.text[0] >= 'A' && who.text[0] <= 'Z';
  std::string pronoun = who.plural ? "they" : isName ? who.text : "it";
  std::string aux = who.plural ? "do" : "does";
  std::string text = (who.plural ? "Do " : "Does ") + who.text + " " +
                     verb.base + " " + what.text + "? ";
  if (rng.chance(0.5))
    text += "Yes, " + pronoun + " " + aux + ".";
  else
    text += "No, " + pronoun + " " + aux + " not.";
  return text;
}

void capitalize(std::string &sentence) {
  if (!sentence.empty() && sentence[0] >= 'a' && sentence[0] <= 'z')
    sentence[0] = static_cast<char>(sentence[0] - 'a' + 'A');
}

std::string sum(Rng &rng) {
  int a = static_cast<int>(rng.below(10));
  int b = static_cast<int>(rng.below(10));
  if (rng.chance(0.5))
    return std::to_string(a) + " plus " + std::to_string(b) + " is " +
           std::to_string(a + b) + ".";
  return std::to_string(a + b) + " minus " + std::to_string(b) + " is " +
         std::to_string(a) + ".";
}

std::string sentence(Rng &rng) {
  std::string text;
  size_t kind = rng.below(100);
  if (kind < 30) {
    text = clause(rng) + ".";
  } else if (kind < 42) {
    std::string time = rng.pick(kTimes);
    text = time + ", " + pastClause(rng) + ".";
  } else if (kind < 52) {
    Phrase who = nounPhrase(rng, rng.pick(kAgents), true);
    std::string adjective = rng.pick(kAdjectives);
    text = who.text + (who.plural ? " are " : " is ") + adjective + ".";
  } else if (kind < 62) {
    int count = 1 + static_cast<int>(rng.below(20));
    const Noun &thing = rng.pick(kThings);
    std::string where = place(rng);
    text = std::string(count == 1 ? "There is " : "There are ") +
           std::to_string(count) + " " + (count == 1 ? thing.one : thing.many) +
           " " + where + ".";
  } else if (kind < 72) {
    std::string name = rng.pick(kNames);
    std::string quoted = clause(rng) + ".";
    capitalize(quoted);
    text = name + " said, \"" + quoted + "\"";
  } else if (kind < 80) {
    text = question(rng);
  } else if (kind < 88) {
    std::string first = clause(rng);
    std::string joint = rng.chance(0.5) ? ", but " : " and ";
    std::string second = clause(rng);
    text = first + joint + second + ".";
  } else if (kind < 94) {
    std::string day = std::to_string(1 + rng.below(30));
    std::string what = pastClause(rng);
    std::string where = place(rng);
    text = "On day " + day + ", " + what + " " + where + ".";
  } else {
    text = sum(rng);
  }
  capitalize(text);
  return text;
}

} // namespace

std::vector<std::string> synthesizeParagraphs(uint64_t seed, int64_t numBytes) {
  std::vector<std::string> paragraphs;
  Rng rng(seed);
  int64_t total = 0;
  while (total < numBytes) {
    std::string paragraph;
    size_t sentences = 3 + rng.below(5);
    for (size_t i = 0; i < sentences; ++i) {
      if (i > 0)
        paragraph += " ";
      paragraph += sentence(rng);
    }
    paragraph += "\n";
    int64_t left = numBytes - total;
    if (static_cast<int64_t>(paragraph.size()) > left)
      paragraph.resize(static_cast<size_t>(left));
    total += static_cast<int64_t>(paragraph.size());
    paragraphs.push_back(std::move(paragraph));
  }
  return paragraphs;
}

} // namespace moe::rt::data
