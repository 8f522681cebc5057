//! The CSV reader: messages, spreadsheet files, linear reading.

use super::*;

fn experiment(loss: &str, outputs: usize) -> Experiment {
    Experiment::from_json(&format!(
        r#"{{"model": {{"inputs": 2, "layers": [{{"units": {outputs}, "activation": "linear"}}]}},
            "loss": "{loss}", "optimizer": {{"kind": "sgd", "lr": 0.1}}, "batch_size": 4,
            "data": {{"source": "csv"}}}}"#
    ))
    .unwrap()
}

#[test]
fn parses_inputs_and_targets_in_order() {
    let e = experiment("mse", 2);
    let t = parse_csv("x1,y0,x2,y1\n1,2,3,4\r\n5,6,7,8\n\n", &e).unwrap();
    assert_eq!(t.inputs, vec![1.0, 3.0, 5.0, 7.0]);
    assert_eq!(t.targets, vec![2.0, 4.0, 6.0, 8.0]);
    assert_eq!(t.rows(), 2);
}

#[test]
fn errors_name_line_and_column() {
    let e = experiment("cross_entropy", 3);
    let cases = [
        ("", "empty"),
        ("x1,x2,z\n", "line 1, column 3"),
        ("x1,y\n1,2\n", "1 input columns"),
        ("x1,x2,y\n1,2,0\n1,abc,1\n", "line 3, column 2: `abc`"),
        ("x1,x2,y\n1,2\n", "line 2: 2 fields"),
        ("x1,x2,y\n1,2,3\n", "line 2, column 3: class `3`"),
        ("x1,x2,y\n1,2,0.5\n", "class `0.5`"),
        ("x1,x2,y\n1,NaN,0\n", "line 2, column 2"),
        ("x1,x2,y\n", "no data rows"),
    ];
    for (text, want) in cases {
        let msg = parse_csv(text, &e).unwrap_err().to_string();
        assert!(msg.contains(want), "{text:?}: {msg}");
    }
    let bce = experiment("bce_with_logits", 1);
    let msg = parse_csv("x1,x2,y\n1,2,2\n", &bce).unwrap_err().to_string();
    assert!(msg.contains("outside [0, 1]"), "{msg}");
    let msg = parse_csv("x1,x2,x1,y\n1,2,3,0\n", &e).unwrap_err().to_string();
    assert!(msg.contains("line 1, column 3: header `x1` appears twice (first in column 1)"), "{msg}");
}

/// What spreadsheet programs write: a byte-order mark, quoted fields,
/// CRLF line ends, blank lines.
#[test]
fn spreadsheet_csv_reads_as_plain_csv() {
    let e = experiment("mse", 2);
    let plain = parse_csv("x1,x2,y0,y1\n1,2,3,4\n5,6,7,8\n", &e).unwrap();
    for text in [
        "\u{feff}x1,x2,y0,y1\r\n1,2,3,4\r\n5,6,7,8\r\n",
        "\"x1\",\"x2\",\"y0\",\"y1\"\n\"1\",2,\" 3 \",4\n\n5,6,7,\"8\"\n",
        "x1, x2 ,y0,y1\n\n1,2,3,4\n   \n5,6,7,8",
    ] {
        assert_eq!(parse_csv(text, &e).unwrap(), plain, "{text:?}");
    }
    // Line numbers count the lines of the file, blank ones included.
    let msg = parse_csv("\u{feff}x1,x2,y0,y1\r\n\r\n1,2,3,4\r\n5,x,7,8\r\n", &e).unwrap_err().to_string();
    assert!(msg.contains("line 4, column 2: `x`"), "{msg}");
}

/// The line tracker looks at each byte of the file at most twice,
/// whatever the number of rows (counting from the start for every
/// record looked at about rows²/2 lines' worth): a count, not a clock.
#[test]
fn reading_looks_at_each_byte_a_bounded_number_of_times() {
    for rows in [10, 1_000, 100_000] {
        let (mut text, mut line, mut last_line) = (String::from("x1,x2,y\n"), 1, 0);
        for i in 0..rows {
            text += &format!("{i},{}.5,{}\n", i % 7, i % 2);
            line += 1;
            last_line = line;
            if i % 10 == 0 {
                text += "\r\n\n";
                line += 2;
            }
        }
        let mut reader = CsvReader::new(text.as_bytes()).unwrap();
        while !reader.advance(usize::MAX).unwrap() {}
        let scanned = reader.bytes_scanned();
        assert!(scanned <= 2 * text.len() as u64, "{rows} rows: {scanned} bytes scanned of {}", text.len());
        assert_eq!(reader.progress().bytes, text.len() as u64);
        let table = reader.finish().unwrap();
        assert_eq!(table.rows(), rows);
        // Lines count the blank ones too.
        assert_eq!(*table.lines.last().unwrap(), last_line);
    }
}

/// A file read some rows at a time is the file read whole, and the
/// progress counts bytes and rows as they are read.
#[test]
fn reading_in_parts_is_reading_whole() {
    let mut text = String::from("\u{feff}x1,y,x2\r\n");
    for i in 0..1000 {
        text += &format!("{i},{},{}\r\n", i % 3, i * 2);
    }
    let whole = read_csv(&text).unwrap();
    let mut reader = CsvReader::new(text.as_bytes()).unwrap();
    let mut last = reader.progress();
    while !reader.advance(37).unwrap() {
        let now = reader.progress();
        assert!(now.bytes > last.bytes && now.rows == last.rows + 37, "{last:?} → {now:?}");
        last = now;
    }
    assert_eq!(reader.progress().fraction(), 1.0);
    assert_eq!(reader.finish().unwrap(), whole);
    assert_eq!(whole.classes(), Some(3));
    assert_eq!(whole.table.inputs[2..4], [1.0, 2.0]);
    let e = experiment("cross_entropy", 3);
    whole.check(&e).unwrap();
    let msg = whole.check(&experiment("cross_entropy", 2)).unwrap_err().to_string();
    assert!(msg.contains("line 4, column 2: class `2`"), "{msg}");
    assert_eq!(read_csv("x1,y\n1,0.5\n").unwrap().classes(), None);
    assert_eq!(read_csv("x1,y0\n1,1\n").unwrap().classes(), None);
}

/// A header of a million names is checked in linear time (a hash map).
#[test]
fn a_wide_header_is_checked_once() {
    let names: Vec<String> = (0..1_000_000).map(|i| format!("x{i}")).collect();
    let mut text = names.join(",");
    assert_eq!(csv_header(&text).unwrap().len(), 1_000_000);
    text += ",x5";
    let msg = csv_header(&text).unwrap_err().to_string();
    assert!(msg.contains("column 1000001: header `x5` appears twice (first in column 6)"), "{msg}");
}
