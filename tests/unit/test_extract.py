"""Extraction: titles, heading paths, dropped navigation, and each bad input's reason."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfReader

from loader.ingest.extract import ExtractionError, extract
from loader.resources import sample_corpus_dir
from tests.pdfs import blank_pdf, text_pdf


def test_postgresql_manual_page_keeps_headings_and_drops_navigation() -> None:
    path = sample_corpus_dir() / "indexes-types.html"
    result = extract(path.read_bytes(), path)

    assert result.title == "11.2. Index Types"
    assert result.metadata["parent"] == "Chapter 11. Indexes"
    headings = [s.heading for s in result.sections]
    assert headings[0] == "Chapter 11. Indexes > 11.2. Index Types"
    assert "Chapter 11. Indexes > 11.2. Index Types > 11.2.1. B-Tree" in headings
    assert "Chapter 11. Indexes > 11.2. Index Types > 11.2.6. BRIN" in headings
    text = "\n".join(s.text for s in result.sections)
    assert "B-trees can handle equality and range queries" in text
    # the navigation header/footer and the per-page table of contents are chrome
    assert "Prev" not in text.split()
    assert "Next" not in text.split()
    assert "11.2.1. B-Tree" not in text  # headings live in the path, not twice in the text


def test_a_page_that_is_only_a_table_of_contents_keeps_it() -> None:
    html = b"""<html><head><title>Chapter 67. B-Tree Indexes</title></head><body>
    <div class="navheader"><a accesskey="u" title="Part VII. Internals">Up</a></div>
    <div class="chapter"><h2>Chapter 67. B-Tree Indexes</h2>
    <div class="toc"><dl class="toc"><dt>67.1. Introduction</dt><dt>67.2. Behavior of B-Tree
    Operator Classes</dt></dl></div></div></body></html>"""
    result = extract(html, "btree.html")
    assert [s.heading for s in result.sections] == [
        "Part VII. Internals > Chapter 67. B-Tree Indexes"
    ]
    assert result.sections[0].text == (
        "67.1. Introduction\n\n67.2. Behavior of B-Tree Operator Classes"
    )


def test_reference_page_nests_sections_under_its_title() -> None:
    path = sample_corpus_dir() / "sql-copy.html"
    result = extract(path.read_bytes(), path)
    headings = [s.heading for s in result.sections]
    assert result.title == "COPY"
    assert "SQL Commands > COPY > Synopsis" in headings
    synopsis = next(s for s in result.sections if s.heading == "SQL Commands > COPY > Synopsis")
    assert "\n    FROM { 'filename'" in synopsis.text  # <pre> keeps its line breaks


def test_generic_html_without_title_uses_first_heading_and_drops_nav() -> None:
    html = b"""<html><body><nav>Home | About | Contact</nav>
    <h1>Leave Policy</h1><p>Employees get  25 days.</p>
    <script>var x = 1;</script>
    <h2>Sick leave</h2><ul><li>Report by 9am.</li><li>Bring a note after 3 days.</li></ul>
    <table><tr><th>Grade</th><th>Days</th></tr><tr><td>A</td><td>30</td></tr></table>
    <footer><div role="navigation">Site map</div></footer></body></html>"""
    result = extract(html, "policy.html")
    assert result.title == "Leave Policy"
    assert [s.heading for s in result.sections] == ["Leave Policy", "Leave Policy > Sick leave"]
    assert result.sections[0].text == "Employees get 25 days."
    assert result.sections[1].text == (
        "Report by 9am.\n\nBring a note after 3 days.\n\nGrade | Days\n\nA | 30"
    )
    everything = " ".join(s.text for s in result.sections)
    assert "Home | About" not in everything
    assert "var x" not in everything
    assert "Site map" not in everything


def test_markdown_headings_paths_and_code_fences() -> None:
    text = (
        "# Runbook\n\nIntro paragraph.\n\n## Backups\n\nNightly at 2am.\n\n"
        "```bash\n# not a heading\npg_dump db\n```\n\n### Restore\n\nUse pg_restore.\n\n"
        "Setext Title\n------------\n\nUnder setext.\n"
    )
    result = extract(text.encode(), "runbook.md")
    assert result.title == "Runbook"
    paths = [s.heading for s in result.sections]
    assert paths == [
        "Runbook",
        "Runbook > Backups",
        "Runbook > Backups > Restore",
        "Runbook > Setext Title",
    ]
    assert "# not a heading" in result.sections[1].text


def test_plain_text_is_one_section_without_title() -> None:
    result = extract(b"First para\nline two.\n\n\n\nSecond   para.", "notes.txt")
    assert result.title is None
    assert len(result.sections) == 1
    assert result.sections[0].text == "First para\nline two.\n\nSecond para."


def test_utf8_bom_is_accepted() -> None:
    assert extract(b"\xef\xbb\xbfhello", "a.txt").sections[0].text == "hello"


@pytest.mark.parametrize(
    ("data", "name", "reason"),
    [
        (b"", "empty.md", "empty file"),
        (b"  \n\n\t ", "blank.txt", "empty file"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image.txt", "binary content"),
        (b"caf\xe9 au lait", "latin1.md", "invalid UTF-8 at byte 3 (0xe9)"),
        (b"<html><body><nav>only navigation</nav></body></html>", "nav.html", "no text"),
        (b"data", "table.xlsx", "unsupported file type .xlsx"),
        (b"%PDF-1.4 garbage", "broken.pdf", "unreadable PDF"),
    ],
)
def test_bad_inputs_say_what_is_wrong(data: bytes, name: str, reason: str) -> None:
    with pytest.raises(ExtractionError) as info:
        extract(data, name)
    assert reason in info.value.message


def test_pdf_text_title_and_pages() -> None:
    data = text_pdf(
        [["Vacuum reclaims storage.", "It runs nightly."], ["Page two explains autovacuum."]],
        title="Maintenance Guide",
    )
    result = extract(data, "guide.pdf")
    assert result.title == "Maintenance Guide"
    assert result.metadata["page_count"] == 2
    assert [s.heading_path for s in result.sections] == [("Page 1",), ("Page 2",)]
    assert "Vacuum reclaims storage." in result.sections[0].text
    assert "autovacuum" in result.sections[1].text


def test_pdf_without_text_layer_is_reported() -> None:
    with pytest.raises(ExtractionError, match="no text layer"):
        extract(blank_pdf(3), "scan.pdf")


def test_encrypted_pdf_is_reported() -> None:
    with pytest.raises(ExtractionError, match="encrypted PDF"):
        extract(text_pdf([["secret"]], password="s3cret"), "locked.pdf")


def test_pdf_encrypted_with_an_empty_user_password_opens() -> None:
    data = text_pdf([["readable though encrypted"]], password="")
    assert PdfReader(io.BytesIO(data)).is_encrypted
    result = extract(data, "owner-only.pdf")
    assert "readable though encrypted" in result.sections[0].text


def test_admonition_titles_label_their_paragraphs_not_the_heading_path() -> None:
    page = b"""<html><head><title>25.1. Routine Vacuuming</title></head><body>
    <h2>25.1.5. Preventing Wraparound</h2><p>Freeze old rows.</p>
    <div class="note"><h3 class="title">Note</h3><p>Vacuum freezes them.</p></div>
    <p>After the note.</p>
    <h3>25.1.5.1. Multixacts and Wraparound</h3><p>Multixact IDs.</p>
    <div class="warning"><h3>Warning</h3><p>Do not disable it.</p></div>
    </body></html>"""
    result = extract(page, "vacuum.html")

    paths = [s.heading_path for s in result.sections]
    assert all("Note" not in p and "Warning" not in p for p in paths)
    assert paths == [
        ("25.1. Routine Vacuuming", "25.1.5. Preventing Wraparound"),
        (
            "25.1. Routine Vacuuming",
            "25.1.5. Preventing Wraparound",
            "25.1.5.1. Multixacts and Wraparound",
        ),
    ]
    assert result.sections[0].text.split("\n\n") == [
        "Freeze old rows.",
        "Note:",
        "Vacuum freezes them.",
        "After the note.",
    ]
    assert "Warning:\n\nDo not disable it." in result.sections[1].text
