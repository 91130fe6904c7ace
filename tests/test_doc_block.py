"""A benchmark rewrites only its own block of a docs page."""
from privfgl.doc_block import write_block


def test_a_block_is_appended_then_replaced_and_the_prose_and_other_blocks_stay(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Page\n\nProse.\n\n<!-- other -->\nkept\n<!-- /other -->\n\nMore prose.\n")
    write_block(page, "bench", "first\n", "unused")
    assert page.read_text().endswith("More prose.\n\n<!-- bench -->\nfirst\n<!-- /bench -->\n")
    write_block(page, "bench", "second\n", "unused")
    text = page.read_text()
    assert "second" in text and "first" not in text
    assert text.startswith("# Page\n\nProse.\n\n<!-- other -->\nkept\n<!-- /other -->\n\nMore prose.\n")


def test_a_missing_page_is_created_with_its_title(tmp_path):
    write_block(tmp_path / "new.md", "bench cuda", "rows\n", "GPU")
    assert (tmp_path / "new.md").read_text() == "# GPU\n\n<!-- bench cuda -->\nrows\n<!-- /bench cuda -->\n"


def test_without_a_title_a_new_page_is_the_block_alone(tmp_path):
    write_block(tmp_path / "new.md", "sweep:x", "table\n")
    assert (tmp_path / "new.md").read_text() == "<!-- sweep:x -->\ntable\n<!-- /sweep:x -->\n"
