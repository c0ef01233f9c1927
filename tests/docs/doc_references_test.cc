// Code and docs cite files inside the repository only (docs/design.md rule 12):
// every Markdown file a source file, script or doc mentions must exist in the tree,
// and nothing may point at a sibling checkout such as ../shared. And every C++
// block of the docs is code the suite builds and runs: a file of a document
// that tests/docs/doc_blocks.sh runs, or an excerpt of a tested program.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = COHORT_SOURCE_DIR;

bool skipped_dir(const fs::path& p) {
  const std::string name = p.filename().string();
  return name == ".git" || name.rfind("build", 0) == 0 || name == "corpus";
}

bool scanned_file(const fs::path& p) {
  static const std::set<std::string> kExt = {".h", ".cc", ".md", ".sh", ".py", ".txt", ".cmake"};
  return kExt.count(p.extension().string()) > 0;
}

std::vector<fs::path> source_files() {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(kRoot); it != fs::recursive_directory_iterator();
       ++it) {
    if (it->is_directory() && skipped_dir(it->path())) {
      it.disable_recursion_pending();
    } else if (it->is_regular_file() && scanned_file(it->path())) {
      out.push_back(it->path());
    }
  }
  return out;
}

std::set<std::string> markdown_names(const std::vector<fs::path>& files) {
  std::set<std::string> names;
  for (const auto& f : files) {
    if (f.extension() == ".md") names.insert(fs::relative(f, kRoot).string());
  }
  return names;
}

// A citation resolves against the repository root, the citing file's folder or docs/.
bool resolves(const std::string& cited, const fs::path& citing) {
  for (const fs::path& base : {kRoot, citing.parent_path(), kRoot / "docs"}) {
    if (fs::exists(base / cited)) return true;
  }
  return false;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") + 1 - b);
}

// The non-blank lines of text, trimmed.
std::vector<std::string> code_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!trim(line).empty()) out.push_back(trim(line));
  }
  return out;
}

struct CodeBlock {
  std::string info;  // what follows the opening fence: "cpp file=x.cc"
  std::string body;
  int line = 0;  // of the opening fence
};

std::vector<CodeBlock> fenced_blocks(const std::string& text) {
  std::vector<CodeBlock> out;
  std::istringstream in(text);
  bool inside = false;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.rfind("```", 0) == 0) {
      if (!inside) out.push_back({line.substr(3), "", n});
      inside = !inside;
    } else if (inside) {
      out.back().body += line + "\n";
    }
  }
  return out;
}

// The value of `key=` in a block's info string, or "".
std::string attribute(const std::string& info, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(info, m, std::regex("(^| )" + key + "=([^ ]+)"))) return "";
  return m[2];
}

}  // namespace

TEST(DocReferences, CodeBlocksOfTheDocsAreBuiltAndRun) {
  const std::string doc_tests = read(kRoot / "tests/docs/CMakeLists.txt");
  std::vector<std::string> bad;
  int checked = 0;
  for (const auto& f : source_files()) {
    if (f.extension() != ".md") continue;
    const std::string where = fs::relative(f, kRoot).string();
    for (const CodeBlock& b : fenced_blocks(read(f))) {
      const std::string lang = b.info.substr(0, b.info.find(' '));
      if (lang != "cpp" && lang != "c++") continue;
      ++checked;
      const std::string at = where + ":" + std::to_string(b.line);
      const std::string excerpt = attribute(b.info, "excerpt");
      if (!attribute(b.info, "file").empty()) {
        // tests/docs/doc_blocks.sh builds the document's files and runs its commands.
        if (doc_tests.find("${PROJECT_SOURCE_DIR}/" + where) == std::string::npos)
          bad.push_back(at + ": a file= block of a document that no docs.* test runs");
      } else if (!excerpt.empty()) {
        // An excerpt of a program or test of the suite, line for line.
        const bool tested = excerpt.rfind("examples/", 0) == 0 ||
                            excerpt.find("_test.cc") != std::string::npos ||
                            excerpt.rfind("tests/", 0) == 0;
        if (!tested || !fs::exists(kRoot / excerpt)) {
          bad.push_back(at + ": excerpt=" + excerpt + " is not an example or test of this tree");
          continue;
        }
        const auto want = code_lines(b.body);
        const auto have = code_lines(read(kRoot / excerpt));
        if (want.empty() ||
            std::search(have.begin(), have.end(), want.begin(), want.end()) == have.end())
          bad.push_back(at + ": the block is not, line for line, in " + excerpt);
      } else {
        bad.push_back(at +
                      ": a C++ block that nothing builds (give it file= in a document "
                      "that doc_blocks.sh runs, or make it an excerpt= of a tested program)");
      }
    }
  }
  EXPECT_GT(checked, 0);
  std::string all;
  for (const auto& b : bad) all += "\n  " + b;
  EXPECT_TRUE(bad.empty()) << bad.size() << " C++ block(s) the suite does not run:" << all;
}

TEST(DocReferences, CitedFilesAreInTheRepository) {
  const auto files = source_files();
  ASSERT_GT(markdown_names(files).count("docs/design.md"), 0u) << "scanned " << kRoot;
  const std::regex md_citation(R"(([A-Za-z0-9_][A-Za-z0-9_./-]*\.md)\b)");
  const std::regex outside(R"(\.\./shared|/work/)");
  std::vector<std::string> bad;
  for (const auto& f : files) {
    const std::string text = read(f);
    const std::string where = fs::relative(f, kRoot).string();
    for (std::sregex_iterator m(text.begin(), text.end(), md_citation), end; m != end; ++m) {
      const std::string cited = (*m)[1];
      if (!resolves(cited, f)) bad.push_back(where + " cites " + cited);
    }
    std::smatch m;
    if (f.filename() != "doc_references_test.cc" && std::regex_search(text, m, outside)) {
      bad.push_back(where + " points outside the repository: " + m.str());
    }
  }
  std::string all;
  for (const auto& b : bad) all += "\n  " + b;
  EXPECT_TRUE(bad.empty()) << bad.size() << " citation(s) of files outside the repository"
                           << " (write the note into docs/ and cite it there):" << all;
}
