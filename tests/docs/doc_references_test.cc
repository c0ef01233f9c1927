// Code and docs cite files inside the repository only (docs/design.md rule 12):
// every Markdown file a source file, script or doc mentions must exist in the tree,
// and nothing may point at a sibling checkout such as ../shared.
#include <gtest/gtest.h>

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

}  // namespace

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
